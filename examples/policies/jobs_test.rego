package fulfiller.jobs_test

import data.fulfiller
import data.fulfiller.jobs

job(name, support) := {
	"method": "tools/call",
	"tool": {"name": name, "server": "jobs", "arguments": {"steps": 3}, "execution": {"taskSupport": support}},
}

test_listed_task_tool_runs_as_a_task if {
	d := jobs.fulfill with input as job("migrate", "required")
	d.action == "fulfill"
	d.task == true
	d.task_timeout == "30m"
}

test_optional_task_support_is_enough if {
	jobs.fulfill with input as job("build", "optional")
}

test_a_tool_that_cannot_be_a_task_is_not_a_job if {
	not jobs.fulfill with input as job("migrate", "forbidden")
	not jobs.fulfill with input as {"method": "tools/call", "tool": {"name": "migrate"}}
}

test_unlisted_tools_are_not_jobs if {
	not jobs.fulfill with input as job("drop_database", "required")
}

test_the_main_policy_runs_jobs_as_tasks if {
	d := fulfiller.decision with input as job("migrate", "required")
	d.action == "fulfill"
	d.task == true
}

test_a_job_on_production_is_escalated if {
	call := object.union(job("migrate", "required"), {"tool": {"name": "migrate", "execution": {"taskSupport": "required"}, "arguments": {"database": "prod-db"}}})
	d := fulfiller.decision with input as call
	d.action == "escalate"
}
