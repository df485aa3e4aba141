package fulfiller_test

import data.fulfiller

# The tests bring their own data (what `fulfiller mcp init` writes), so
# that `fulfiller test` passes on the written files whatever the user's
# working trees are.
roots := ["/home/dev/src", "/work/"]

call(name, arguments) := {
	"front_end": "mcp",
	"method": "tools/call",
	"params": {"name": name, "arguments": arguments},
	"tool": {"name": name, "server": "fs", "arguments": arguments},
	"proposer": {"id": "local"},
}

decide(name, arguments) := d if {
	d := fulfiller.decision with input as call(name, arguments)
		with data.workspace_roots as roots
		with data.home as "/home/dev"
		with data.developer as {}
}

asks(d) if {
	d.action == "escalate"
	d.approvers == ["@caller"]
}

refused(d) if {
	d.action == "reject"
	d.reason == "policy"
}

# --- runs ---------------------------------------------------------------

test_reads_inside_the_tree_run if {
	decide("read_text_file", {"path": "/home/dev/src/app/main.go"}) == {"action": "fulfill", "message": "read inside the working tree"}
	decide("list_directory", {"path": "/home/dev/src"}).action == "fulfill" # the root itself
	decide("list_directory", {"path": "/home/dev/src/"}).action == "fulfill"
	decide("read_multiple_files", {"paths": ["/home/dev/src/a", "/work/b"]}).action == "fulfill"
	decide("list_allowed_directories", {}).action == "fulfill"
	decide("git_status", {"repo_path": "/home/dev/src/app"}).action == "fulfill"
	decide("read_text_file", {"path": "~/src/app/README.md"}).action == "fulfill" # ~ is data.home
}

test_writes_inside_the_tree_run if {
	decide("write_file", {"path": "/home/dev/src/app/main.go", "content": "package main"}) == {"action": "fulfill", "message": "write inside the working tree"}
	decide("edit_file", {"path": "/work/x/y.txt", "edits": []}).action == "fulfill"
	decide("move_file", {"source": "/home/dev/src/a", "destination": "/home/dev/src/b"}).action == "fulfill"
	decide("git_add", {"repo_path": "/home/dev/src/app", "files": ["main.go", "."]}).action == "fulfill"
	decide("git_commit", {"repo_path": "/home/dev/src/app", "message": "fix"}).action == "fulfill"
}

# A file's content may mention a secret's path: only paths are judged.
test_content_is_not_a_path if {
	decide("write_file", {"path": "/home/dev/src/README.md", "content": "ssh keys live in ~/.ssh/id_rsa"}).action == "fulfill"
}

# --- asks @caller -------------------------------------------------------

test_outside_the_tree_asks_the_caller if {
	d := decide("write_file", {"path": "/etc/hosts", "content": "x"})
	asks(d)
	d.message == "write_file reaches outside the working tree (/home/dev/src, /work/): /etc/hosts"
	asks(decide("read_text_file", {"path": "/etc/hosts"})) # reads too
	asks(decide("read_multiple_files", {"paths": ["/home/dev/src/a", "/etc/passwd"]}))
	asks(decide("move_file", {"source": "/home/dev/src/a", "destination": "/tmp/a"}))
	asks(decide("git_status", {"repo_path": "/home/dev/other"}))
	asks(decide("git_add", {"repo_path": "/home/dev/src/app", "files": ["/etc/hosts"]}))
}

# A root is a directory, not a prefix of names: /home/dev/src2 is not in
# /home/dev/src.
test_a_sibling_with_the_roots_prefix_is_outside if {
	asks(decide("write_file", {"path": "/home/dev/src2/x", "content": ""}))
	asks(decide("write_file", {"path": "/home/dev/srcx", "content": ""}))
}

# Paths are judged as the file system reads them: .., // and
# percent-encoded dots do not take a path out of the tree unnoticed.
test_dot_dot_does_not_escape if {
	d := decide("write_file", {"path": "/home/dev/src/app/../../.bashrc", "content": "curl x | sh"})
	asks(d)
	d.message == "write_file reaches outside the working tree (/home/dev/src, /work/): /home/dev/src/app/../../.bashrc (that is /home/dev/.bashrc)"
	asks(decide("git_add", {"repo_path": "/home/dev/src/app", "files": ["../../../.profile"]}))
	decide("write_file", {"path": "/home/dev/src/app/../lib/x.go", "content": ""}).action == "fulfill" # still inside
}

test_double_slash_does_not_escape if {
	asks(decide("write_file", {"path": "/home/dev/src//..//..//.bashrc", "content": ""}))
	asks(decide("write_file", {"path": "//etc/cron.d/x", "content": ""}))
}

test_encoded_dots_do_not_escape if {
	asks(decide("write_file", {"path": "/home/dev/src/%2e%2e/.bashrc", "content": ""}))
	asks(decide("write_file", {"path": "/home/dev/src/.%2E/%2e%2e/etc/x", "content": ""}))
	asks(decide("write_file", {"path": "/home/dev/src%2f..%2f..%2fetc/x", "content": ""}))
	asks(decide("write_file", {"path": "/home/dev/src/%zz", "content": ""})) # broken encoding: not known to be inside
}

test_deletes_and_pushes_ask_the_caller if {
	d := decide("git_push", {"repo_path": "/home/dev/src/app", "remote": "origin"})
	asks(d)
	d.message == "git_push is named for a push, which is asked about wherever it points"
	asks(decide("delete_file", {"path": "/home/dev/src/app/x"}))
	asks(decide("deleteFile", {"path": "/home/dev/src/app/x"}))
	asks(decide("git_clean", {"repo_path": "/home/dev/src/app"}))
}

test_rm_is_a_word_not_a_prefix if {
	refused(decide("rmsnorm_stats", {})) # unknown, not a delete
	asks(decide("fs_rm", {"path": "/home/dev/src/x"}))
}

# Files that run as code — a git hook, git's config, VS Code's tasks —
# are asked about even inside the tree: the next commit would run them.
test_writes_where_files_run_as_code_ask_the_caller if {
	d := decide("write_file", {"path": "/home/dev/src/app/.git/hooks/pre-commit", "content": "curl x | sh"})
	asks(d)
	d.message == "write_file writes where files run as code (.git, .husky, .vscode): /home/dev/src/app/.git/hooks/pre-commit"
	asks(decide("edit_file", {"path": "/home/dev/src/app/.git/config", "edits": []}))
	asks(decide("write_file", {"path": "/home/dev/src/app/.vscode/tasks.json", "content": "{}"}))
	asks(decide("write_file", {"path": "/home/dev/src/app/%2egit/config", "content": ""}))
	decide("read_text_file", {"path": "/home/dev/src/app/.git/HEAD"}).action == "fulfill" # reading runs nothing
	decide("write_file", {"path": "/home/dev/src/app/.gitignore", "content": ""}).action == "fulfill"
}

# A tool whose definition changed since it was pinned (a rug pull) is
# asked about, even a read inside the tree.
test_a_changed_tool_asks_the_caller if {
	d := fulfiller.decision with input as object.union(
		call("read_text_file", {"path": "/home/dev/src/a"}),
		{"tool": {"changed": true, "digest": "sha256:new", "pinned_digest": "sha256:old"}},
	)
		with data.workspace_roots as roots
		with data.developer as {}
	asks(d)
	d.message == "the definition of read_text_file of fs changed since it was pinned (sha256:old, now sha256:new): approve only if you expected the change; `fulfiller mcp accept-tools fs` records it"
}

# --- refused ------------------------------------------------------------

test_secrets_are_refused if {
	d := decide("read_text_file", {"path": "/home/dev/src/app/.env"})
	d == {
		"action": "reject", "reason": "policy",
		"message": "/home/dev/src/app/.env is a secret (*.env, .env): fulfiller never lets an agent touch secrets. Work without it, or ask the user to give you only what you need",
	}
	refused(decide("read_text_file", {"path": "~/.ssh/id_ed25519"}))
	refused(decide("list_directory", {"path": "/home/dev/.ssh"}))
	refused(decide("read_text_file", {"path": "/home/dev/src/certs/server.pem"}))
	refused(decide("read_text_file", {"path": "/home/dev/src/app/.ENV"})) # case-blind file systems
	refused(decide("read_text_file", {"path": "/home/dev/.aws/credentials"}))
	refused(decide("write_file", {"path": "/home/dev/src/app/id_rsa", "content": ""}))
	refused(decide("read_multiple_files", {"paths": ["/home/dev/src/a", "/home/dev/src/.env.local"]}))
	refused(decide("move_file", {"source": "/home/dev/.ssh/id_rsa", "destination": "/home/dev/src/k"}))
}

# Secrets inside the tree are refused too, and beat asking.
test_a_secret_outside_is_refused_not_asked if {
	refused(decide("read_text_file", {"path": "/root/.ssh/authorized_keys"}))
}

test_encoded_secrets_are_refused if {
	refused(decide("read_text_file", {"path": "/home/dev/%2essh/id_rsa"}))
	refused(decide("read_text_file", {"path": "/home/dev/src/app/%2Eenv"}))
	refused(decide("read_text_file", {"path": "/home/dev/src/x/../.env"}))
}

# git add .env would put the secret in history.
test_staging_a_secret_is_refused if {
	refused(decide("git_add", {"repo_path": "/home/dev/src/app", "files": [".env"]}))
}

test_env_templates_are_not_secrets if {
	decide("read_text_file", {"path": "/home/dev/src/app/.env.example"}).action == "fulfill"
}

test_relative_paths_are_refused_with_what_to_do if {
	d := decide("write_file", {"path": "src/main.go", "content": ""})
	d.message == "src/main.go is a relative path, and fulfiller cannot tell where it points: call write_file again with an absolute path inside /home/dev/src, /work/"
	refused(d)
}

test_unknown_tools_are_refused if {
	d := decide("browser_navigate", {"url": "https://example.com"})
	d == {
		"action": "reject", "reason": "policy",
		"message": "fulfiller's starter policy does not know the tool browser_navigate of fs, so it cannot check what it would do. Ask the user to list it in data.yaml (developer.read_tools, write_tools or ask_tools)",
	}
}

test_unknown_tools_may_be_asked_instead if {
	d := fulfiller.decision with input as call("browser_navigate", {"url": "https://example.com"})
		with data.workspace_roots as roots
		with data.developer as {"unknown_tools": "ask"}
	asks(d)
}

# Of an unknown tool every string argument is looked at for secrets.
test_an_unknown_tools_secret_is_refused_even_when_asked if {
	d := fulfiller.decision with input as call("blob_copy", {"blob": {"from": "/home/dev/.ssh/id_rsa"}})
		with data.workspace_roots as roots
		with data.developer as {"unknown_tools": "ask"}
	contains(d.message, "is a secret")
}

test_settings_extend_the_lists if {
	d := fulfiller.decision with input as call("fetch", {"url": "https://example.com"})
		with data.workspace_roots as roots
		with data.developer as {"read_tools": ["fetch"]}
	d.action == "fulfill"
}

test_no_roots_asks_about_every_path if {
	d := fulfiller.decision with input as call("write_file", {"path": "/home/dev/src/a", "content": ""})
		with data.workspace_roots as []
		with data.developer as {}
	asks(d)
	contains(d.message, "no working tree is set")
}

test_empty_input_is_refused if {
	fulfiller.decision.action == "reject" with input as {}
}

# --- the same policy in a MEW space ---------------------------------------

mew(name, arguments) := object.union(call(name, arguments), {"front_end": "mew"})

test_in_a_space_the_same_reads_and_writes_run if {
	d := fulfiller.decision with input as mew("write_file", {"path": "/home/dev/src/a", "content": ""})
		with data.workspace_roots as roots
		with data.developer as {}
	d.action == "fulfill"
}

# A space has no caller: what would be asked goes to mew_approvers, or is
# refused when there are none (never sent to "@caller", whom a space cannot reach).
test_in_a_space_questions_go_to_its_approvers if {
	d := fulfiller.decision with input as mew("write_file", {"path": "/etc/hosts", "content": ""})
		with data.workspace_roots as roots
		with data.developer as {}
	refused(d)
	d.message == "write_file reaches outside the working tree (/home/dev/src, /work/): /etc/hosts; in a space nobody can be asked (set developer.mew_approvers in data.yaml)"
	e := fulfiller.decision with input as mew("write_file", {"path": "/etc/hosts", "content": ""})
		with data.workspace_roots as roots
		with data.developer as {"mew_approvers": ["alice"]}
	e.action == "escalate"
	e.approvers == ["alice"]
}

test_in_a_space_discovery_runs if {
	fulfiller.decision.action == "fulfill" with input as {"front_end": "mew", "method": "tools/list", "params": {}}
}
