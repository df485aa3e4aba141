package policies

import (
	"github.com/open-policy-agent/opa/v1/ast"
)

// fieldSet is a set of top-level input fields.
type fieldSet uint16

// The top-level fields of the input document.
const (
	fieldProposal fieldSet = 1 << iota
	fieldMethod
	fieldParams
	fieldTool
	fieldProposer
	fieldSpace
	fieldAgent
	fieldApproval
	fieldNow
	fieldGrants
	fieldFrontEnd

	allFields fieldSet = 1<<iota - 1
)

var fieldNames = map[string]fieldSet{
	"proposal":  fieldProposal,
	"method":    fieldMethod,
	"params":    fieldParams,
	"tool":      fieldTool,
	"proposer":  fieldProposer,
	"space":     fieldSpace,
	"agent":     fieldAgent,
	"approval":  fieldApproval,
	"now":       fieldNow,
	"grants":    fieldGrants,
	"front_end": fieldFrontEnd,
}

func (s fieldSet) has(f fieldSet) bool { return s&f != 0 }

// inputFields returns the top-level input fields the modules can read.
//
// It looks at every reference to input as written: input.tool.name and
// input["tool"] need "tool". Anything it cannot pin to a field — input on
// its own (walk(input, …), x := input, print(input), with input as …),
// input[k] with a variable k, an import of input — needs every field. The
// answer is therefore never too small: a field left out is one no rule can
// observe, so leaving it out cannot change a decision.
func inputFields(modules []*ast.Module) fieldSet {
	var need fieldSet
	for _, m := range modules {
		ast.WalkTerms(m, func(t *ast.Term) bool {
			if need == allFields {
				return true
			}
			switch v := t.Value.(type) {
			case ast.Var:
				// A bare input, as in an import or a `with` target.
				if v.Equal(ast.InputRootDocument.Value) {
					need = allFields
				}
			case ast.Ref:
				if !v[0].Equal(ast.InputRootDocument) {
					return false
				}
				if len(v) < 2 {
					need = allFields
					return true
				}
				key, ok := v[1].Value.(ast.String)
				if !ok {
					need = allFields
					return true
				}
				// Keys the contract does not define are never
				// built, whatever the policy asks for.
				need |= fieldNames[string(key)]
				return true
			}
			return false
		})
	}
	return need
}
