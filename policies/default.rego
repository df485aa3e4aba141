# The policy fulfiller runs when it is started without --policy.
#
# It rejects every proposal, so that a sidecar started with a missing or
# mistyped flag can never fulfil anything on its own.
package fulfiller

decision := {
	"action": "reject",
	"reason": "policy",
	"message": "no policy is loaded, so fulfiller rejects every proposal: start it with --policy PATH (a .rego file or a directory; see examples/policies/README.md) to decide proposals",
}
