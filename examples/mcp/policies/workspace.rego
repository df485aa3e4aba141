# METADATA
# title: The developer's workspace
# description: |
#   What the starter policy knows about a call: which kind of tool it is
#   (a read, a write, a delete or a push, or unknown), the paths it names,
#   whether they lie inside the working trees (data.workspace_roots, which
#   `fulfiller mcp init` writes) and whether any is a secret.
package fulfiller.workspace

import data.fulfiller.paths

# The defaults, for the filesystem server (@modelcontextprotocol/server-filesystem)
# and the git server (mcp-server-git). data.developer in data.yaml adds
# to them (a list given there is added to the one here; any other value
# replaces it), so that tuning the policy never means editing this file.
defaults := {
	# Tools that only look. They run when every path they name is inside
	# a working tree.
	"read_tools": [
		"read_file", "read_text_file", "read_media_file", "read_multiple_files",
		"list_directory", "list_directory_with_sizes", "directory_tree",
		"search_files", "get_file_info", "list_allowed_directories",
		"git_status", "git_diff_unstaged", "git_diff_staged", "git_diff",
		"git_log", "git_show", "git_branch",
	],
	# Tools that change files, the index or a branch, and nothing beyond
	# the machine. They run inside a working tree (git undoes them).
	"write_tools": [
		"write_file", "edit_file", "create_directory", "move_file",
		"git_add", "git_commit", "git_commit_signed", "git_reset",
		"git_create_branch", "git_checkout",
	],
	# Tools always asked about, wherever they point.
	"ask_tools": [],
	# A tool whose name holds one of these words (split at _ - . or
	# starting with it: deleteFile) deletes or publishes: asked about.
	"delete_words": ["delete", "remove", "rm", "unlink", "destroy", "purge", "drop", "trash", "clean", "prune"],
	"push_words": ["push", "publish", "deploy", "release", "upload"],
	# Directories whose files run as code — git's hooks and config, husky's
	# hooks, VS Code's tasks — which a write inside a tree still asks
	# about: the next git commit or folder opening would run what it wrote.
	"guarded_dirs": [".git", ".husky", ".vscode"],
	# Argument keys that hold a path (string) or paths (array of strings).
	"path_arguments": ["path", "paths", "source", "destination", "repo_path", "file", "filename", "directory"],
	# Argument keys whose paths are relative to the call's repo_path
	# (git_add's files).
	"repo_relative_arguments": ["files"],
	# A path is a secret when a directory on it is one of secret_dirs, or
	# its file name matches one of secret_names (glob, compared in lower
	# case: macOS and Windows file names are case-blind).
	"secret_dirs": [".ssh", ".gnupg", ".aws", ".azure", ".kube", ".password-store", "gcloud"],
	"secret_names": [
		".env", ".env.*", "*.env", ".envrc",
		"*.pem", "*.key", "*.p12", "*.pfx", "*.jks", "*.keystore", "*.kdbx",
		"id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
		"credentials", "credentials.*", ".git-credentials", ".netrc", ".pgpass",
		".npmrc", ".pypirc", "secrets.*", "*.tfvars", "*.tfstate",
	],
	# Templates that hold no secret, though their names say .env.
	"not_secret_names": [".env.example", ".env.sample", ".env.template", ".env.dist"],
	# What happens to a tool none of the lists above names: "reject" (the
	# default: the policy cannot tell what its arguments mean, so it
	# cannot check them) or "ask" (the person at the client decides).
	"unknown_tools": "reject",
	# In a MEW space there is no caller to ask: these approvers are asked
	# instead. Empty: what would be asked is rejected there.
	"mew_approvers": [],
}

default overrides := {}

overrides := data.developer

# Each setting is a rule of its own, so that a decision computes only
# the ones it reads, once.
read_tools := setting("read_tools")

write_tools := setting("write_tools")

ask_tools := setting("ask_tools")

delete_words := setting("delete_words")

push_words := setting("push_words")

path_arguments := setting("path_arguments")

repo_relative_arguments := setting("repo_relative_arguments")

guarded_dirs := setting("guarded_dirs")

secret_dirs := setting("secret_dirs")

secret_names := setting("secret_names")

not_secret_names := setting("not_secret_names")

unknown_tools := setting("unknown_tools")

mew_approvers := setting("mew_approvers")

setting(k) := array.concat(defaults[k], overrides[k]) if {
	is_array(defaults[k])
	is_array(overrides[k])
} else := object.get(overrides, k, defaults[k])

# The working trees, absolute, as init wrote them.
default roots := []

roots := data.workspace_roots

# --- the tool ---------------------------------------------------------

name := input.tool.name

lname := lower(name)

# The words of the tool's name: git_push → git, push.
words := {w | some w in regex.split(`[^a-z0-9]+`, lname); w != ""}

# kind is the first that fits: ask (listed, or named for a delete or a
# push), read, write; else unknown.
kind := "ask" if {
	name in ask_tools
} else := "delete" if {
	named_for(delete_words)
} else := "push" if {
	named_for(push_words)
} else := "read" if {
	name in read_tools
} else := "write" if {
	name in write_tools
} else := "unknown"

named_for(ws) if {
	some w in ws
	w in words
}

named_for(ws) if {
	some w in ws
	count(w) > 2 # "rm" would match "rmdir" but also "rmsnorm": only whole words
	startswith(lname, w)
}

# --- its paths --------------------------------------------------------

# Every path the call names, as written ("~" expanded with data.home).
named contains expand(p) if {
	some k in path_arguments
	some p in strings_of(input.tool.arguments[k])
}

named contains expand(p) if {
	some k in repo_relative_arguments
	some f in strings_of(input.tool.arguments[k])
	p := relative_to_repo(f)
}

strings_of(v) := [v] if is_string(v)

strings_of(v) := [s | some s in v; is_string(s)] if is_array(v)

relative_to_repo(f) := f if startswith(f, "/")

relative_to_repo(f) := f if startswith(f, "~")

relative_to_repo(f) := concat("/", [input.tool.arguments.repo_path, f]) if {
	not startswith(f, "/")
	not startswith(f, "~")
	is_string(input.tool.arguments.repo_path)
}

# expand(p) is p with a leading ~ made the home directory (data.home), as
# the filesystem server does; without data.home, p unchanged (relative).
expand(p) := concat("", [data.home, substring(p, 1, -1)]) if {
	is_string(data.home)
	p == "~"
} else := concat("", [data.home, substring(p, 1, -1)]) if {
	is_string(data.home)
	startswith(p, "~/")
} else := p

# Paths that do not start at the root: where they point depends on the
# server's working directory, which the policy does not know.
relative contains p if {
	some p in named
	not startswith(p, "/")
}

# Paths outside every working tree, as a file system reads them
# (paths.rego: no .., //, or percent-encoded dot takes a path out of a
# tree unnoticed).
outside contains p if {
	some p in named
	startswith(p, "/")
	not inside(p)
}

# outside_shown is outside as a person reads it: each path as written and,
# where .., // or an encoding hide it, where it really points.
outside_shown := sort([shown(p) | some p in outside])

shown(p) := sprintf("%s (that is %s)", [p, paths.clean(p)]) if paths.clean(p) != p

else := p

inside(p) if {
	some r in roots
	paths.under(p, dir_of(r))
}

# The root itself (list_directory of the tree).
inside(p) if {
	some r in roots
	top := trim_suffix(dir_of(r), "/")
	paths.resolve(p) == top
	paths.clean(p) == top
}

# dir_of(r) is root r, cleaned, with one trailing "/".
dir_of(r) := "/" if paths.resolve(r) == "/"

else := concat("", [paths.resolve(r), "/"])

# Paths a write names inside a directory whose files run as code.
guarded contains p if {
	kind == "write"
	some p in named
	some form in forms(p)
	some s in segments(form)
	s in guarded_dirs
}

segments(path) := [s | some s in split(lower(path), "/"); s != ""]

# --- secrets ----------------------------------------------------------

# The paths that are secrets, with what made them one. A path is looked
# at as written and as decoded: %2essh is .ssh to a server that decodes.
secrets contains [p, concat(", ", sort(marks))] if {
	some p in candidates
	marks := {m | some form in forms(p); some m in secret_marks(form)}
	count(marks) > 0
}

# Paths named by path arguments; for a tool the policy does not know,
# every string argument, at any depth (its keys mean nothing to it).
candidates := named if kind != "unknown"

else := {s | walk(input.tool.arguments, [_, s]); is_string(s)}

forms(p) := {paths.resolve(p), paths.clean(p)} if paths.clean(p)

else := {paths.resolve(p)}

secret_marks(path) := dirs | names if {
	segs := segments(path)
	dirs := {d | some s in segs; some d in secret_dirs; s == d}
	last := segs[count(segs) - 1]
	names := {g |
		not last in not_secret_names
		some g in secret_names
		glob.match(g, null, last)
	}
}
