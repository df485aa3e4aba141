package policies

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestMissingData: the data documents the policies read and nothing
// provides are listed by their shortest missing path, whether read
// directly, through an import alias or in another package; reads of the
// policies' own packages (rules, a package not written yet) and reads
// that --data provides are not; a bundle's example policies without
// their data.yaml miss data.settings, which is what makes the blocklist
// silently stop matching.
func TestMissingData(t *testing.T) {
	policy := `package fulfiller

import data.lists.blocked as blocked

decision := {"action": "reject", "reason": "policy"} if input.proposer.id in blocked
decision := {"action": "reject", "reason": "policy"} if data.limits.max < input.agent.pending
decision := {"action": "fulfill"} if data.fulfiller.suggested[_].fulfill
decision := {"action": "fulfill"} if data.helpers.ok
decision := {"action": "fulfill"} if data["team-settings"].open
decision := {"action": "fulfill"} if data.envs[input.env].open
`
	helpers := "package helpers\n\nok if input.method == \"tools/list\"\n"
	tests := []struct {
		name string
		data map[string]string // file → content; none: no --data
		want []string
	}{
		{"no data", nil, []string{"data.envs", "data.limits", "data.lists", `data["team-settings"]`}},
		{"some data", map[string]string{"d.yaml": "lists: {other: []}\nlimits: {max: 3}\nenvs: {}\n"},
			[]string{"data.lists.blocked", `data["team-settings"]`}},
		{"all data", map[string]string{"d.yaml": "lists: {blocked: [mallory]}\nlimits: {max: 3}\nenvs: {prod: {open: false}}\nteam-settings: {open: true}\n"}, nil},
		{"a list where an object is read", map[string]string{"d.json": `{"lists": [1], "limits": {"max": 3}, "envs": {}, "team-settings": {"open": true}}`}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeTree(t, map[string]string{"policy.rego": policy, "helpers.rego": helpers})
			var data []string
			for name, content := range tc.data {
				path := filepath.Join(t.TempDir(), name)
				writeFile(t, path, content)
				data = append(data, path)
			}
			e, err := Load(t.Context(), Options{Policies: []string{dir}, Data: data, Logger: quietLogger()})
			if err != nil {
				t.Fatal(err)
			}
			if got := e.MissingData(); !slices.Equal(got, tc.want) {
				t.Errorf("MissingData() = %q, want %q", got, tc.want)
			}
		})
	}

	examples := filepath.Join("..", "examples", "policies")
	e, err := Load(t.Context(), Options{Policies: []string{examples}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.MissingData(); !slices.Equal(got, []string{"data.settings"}) {
		t.Errorf("examples without data.yaml: MissingData() = %q, want [data.settings]", got)
	}
	e, err = Load(t.Context(), Options{Policies: []string{examples}, Data: []string{filepath.Join(examples, "data.yaml")}, Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	if got := e.MissingData(); len(got) != 0 {
		t.Errorf("examples with data.yaml: MissingData() = %q, want none", got)
	}
	if got := loadInline(t, "package fulfiller\n\ndecision := {\"action\": \"fulfill\"}\n").MissingData(); len(got) != 0 {
		t.Errorf("a policy reading no data: MissingData() = %q", got)
	}
}
