package policies

import (
	"time"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/mewkit/fulfiller/fulfill/decision"
)

// parseGrantable reads a decision's grantable object strictly: a grant is
// standing permission, so an offer the sidecar cannot read exactly is a
// malformed decision (a fail-closed reject), never a wider grant.
func parseGrantable(v ast.Value) (*Grantable, error) {
	const name = "grantable"
	obj, ok := v.(ast.Object)
	if !ok {
		return nil, malformed(name, "must be an object with max_ttl and scope, got %s", ast.ValueName(v))
	}
	var g Grantable
	var errs []error
	var haveTTL, haveScope bool
	obj.Foreach(func(k, val *ast.Term) {
		key, _ := k.Value.(ast.String)
		switch string(key) {
		case "max_ttl":
			haveTTL = true
			s, err := stringField(name+".max_ttl", val.Value)
			if err == nil {
				g.MaxTTL, err = time.ParseDuration(s)
				if err != nil {
					err = malformed(name+".max_ttl", "%q is not a duration such as \"8h\"", s)
				} else if g.MaxTTL <= 0 {
					err = malformed(name+".max_ttl", "must be positive, got %q", s)
				}
			}
			if err != nil {
				errs = append(errs, err)
			}
		case "scope":
			haveScope = true
			list, err := stringList(name+".scope", val.Value)
			if err == nil {
				g.Scope, err = decision.ParseScope(list)
			}
			if err != nil {
				errs = append(errs, err)
			}
		default:
			errs = append(errs, malformed(name, "unknown key %v (want max_ttl and scope)", k))
		}
	})
	switch {
	case len(errs) > 0:
		return nil, errs[0]
	case !haveTTL:
		return nil, malformed(name+".max_ttl", "missing")
	case !haveScope:
		return nil, malformed(name+".scope", "missing")
	}
	return &g, nil
}
