package fulfiller.paths_test

import data.fulfiller.paths

test_clean_dot_dot if {
	paths.clean("/srv/public/../etc/shadow") == "/srv/etc/shadow"
	paths.clean("/srv/public/../../etc/shadow") == "/etc/shadow"
	paths.clean("/srv/public/a/b/../../../etc") == "/srv/etc"
	paths.clean("/../../etc/passwd") == "/etc/passwd"
	paths.clean("/srv/public/..") == "/srv"
	paths.clean("/srv/..") == "/"
}

test_clean_double_slash if {
	paths.clean("/srv//public///a.txt") == "/srv/public/a.txt"
	paths.clean("//etc/./shadow/") == "/etc/shadow"
}

test_clean_encoded_dots if {
	paths.clean("/srv/public/%2e%2e/%2e%2e/etc/shadow") == "/etc/shadow"
	paths.clean("/srv/public/%2E%2E%2fetc%2Fshadow") == "/srv/etc/shadow"
	paths.clean("/srv/public/.%2e/etc/shadow") == "/srv/etc/shadow"
	paths.clean("/srv/public/a+b.txt") == "/srv/public/a+b.txt"
}

test_under_refuses_what_startswith_lets_through if {
	startswith("/srv/public/../etc/shadow", "/srv/public/") # the hole
	not paths.under("/srv/public/../etc/shadow", "/srv/public/")
	not paths.under("/srv/public//..//etc/shadow", "/srv/public/")
	not paths.under("/srv/public/%2e%2e/etc/shadow", "/srv/public/")
	not paths.under("/srv/public%2fa.txt", "/srv/public/") # /srv/"public%2fa.txt" to a server that does not decode
	not paths.under("/srv/public", "/srv/public/")
	paths.under("/srv/public/a.txt", "/srv/public/")
	paths.under("/srv/public/docs/../a.txt", "/srv/public/")
}

test_broken_encoding_is_never_under if {
	not paths.under("/srv/public/%zz", "/srv/public/")
}

# A path already clean is returned as it is, without the segment walk;
# the walk still gives what the shortcut would not.
test_clean_paths_as_they_are if {
	paths.clean("/srv/app/config.yaml") == "/srv/app/config.yaml"
	paths.clean("/srv/a+b/c") == "/srv/a+b/c"
	paths.clean("/srv/app/") == "/srv/app"
	paths.clean("srv/app") == "/srv/app"
	paths.clean("/srv/.hidden/x") == "/srv/.hidden/x"
	paths.clean("/srv/./x/.") == "/srv/x"
	paths.clean("/") == "/"
	paths.clean("") == "/"
}
