// Package policies decides proposals with Rego policies, embedded with Open
// Policy Agent's v1 packages.
//
// An Engine holds one compiled policy set at a time — .rego files plus JSON
// and YAML data documents — prepared once for the query
// data.fulfiller.decision (see docs/design.md, "Policy contract"). Decide builds
// the input document straight into OPA's AST, evaluates it under a
// deadline and reads the decision strictly; anything that goes wrong becomes
// a reject with reason "policy" that says why (fail closed). Watch reloads
// the set when its files change, swapping in a new one only if it compiles.
// Every decision names the revision, a content hash, of the set that made
// it. Without policies the engine runs an embedded policy that rejects
// everything.
//
// OPA bundles (what opa build writes) load beside .rego files, read and
// signature-checked with OPA's bundle package; a bundle served over HTTP
// (RemoteBundle) is polled by PollBundle. A bundle's revision is its
// manifest's.
//
// RunTests runs a policy's Rego unit tests as opa test does.
package policies
