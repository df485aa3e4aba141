# METADATA
# title: Long-running jobs
# description: |
#   Tools that run as MCP tasks (their owner declares execution.taskSupport)
#   and that the team lists in data.settings.jobs may run, as tasks, for at
#   most data.settings.job_timeout. A job that touches production is still
#   escalated (production.rego comes first in main.rego).
package fulfiller.jobs

# A listed job whose owner can run it as a task: run it as one.
fulfill := {
	"action": "fulfill",
	"task": true,
	"task_timeout": data.settings.job_timeout,
	"message": "long-running job, run as a task",
} if {
	input.method == "tools/call"
	input.tool.name in data.settings.jobs
	input.tool.execution.taskSupport in {"required", "optional"}
}
