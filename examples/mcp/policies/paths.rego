# METADATA
# title: Paths as a file system reads them
# description: |
#   A prefix check on a path as proposed is a hole: startswith(p,
#   "/srv/public/") lets /srv/public/../etc/shadow through. Compare the
#   path a file system will open instead: clean(p), and under(p, dir).
package fulfiller.paths

# resolve(p) is p as an absolute path with "//" and "." dropped and each
# ".." taking the segment before it away (never above the root):
# /srv/public/../etc//shadow is /etc/shadow. It decodes nothing.
resolve(p) := p if {
	resolved(p)
} else := concat("/", array.concat([""], kept)) if {
	segs := [s | some s in split(p, "/"); not s in {"", "."}]
	kept := [s | some i, s in segs; s != ".."; not cancelled(segs, i)]
	count(kept) > 0
} else := "/"

# resolved(p): p is already as resolve makes it (absolute, no empty,
# "." or ".." segment, no trailing "/"), which most paths are: they skip
# the segment walk, which costs a decision far more than the checks here.
resolved(p) if {
	startswith(p, "/")
	not contains(p, "//")
	not contains(p, "/.")
	not endswith(p, "/")
}

# Segment i is taken away when, at some point after it, the ".." segments
# since it outnumber the others.
cancelled(segs, i) if {
	i + 1 < count(segs)
	some j in numbers.range(i + 1, count(segs) - 1)
	sum([weight(segs[k]) | some k in numbers.range(i + 1, j)]) > 0
}

weight(s) := 1 if s == ".."

else := -1

# clean(p) is resolve(p) after percent-decoding, for a server that decodes
# what it is sent: /srv/public/%2e%2e/etc/shadow is /etc/shadow too. ("+"
# is kept: it means a space only in query strings.) Undefined for a path
# whose percent-encoding is broken.
clean(p) := resolve(p) if {
	not contains(p, "%") # nothing to decode: decoding would give p back
} else := resolve(urlquery.decode(replace(p, "+", "%2B")))

# under(p, dir) holds when p lies below dir (written with its trailing
# "/") both as sent and as decoded: whichever the tool server does, it
# reads inside dir.
under(p, dir) if {
	endswith(dir, "/")
	startswith(resolve(p), dir)
	startswith(clean(p), dir)
}
