package notify

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/mail"
	"os"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/mewkit/fulfiller/internal/printable"
)

// Person is how to reach one approver outside the space.
type Person struct {
	Name  string `yaml:"name"`
	Email string `yaml:"email"`
	Slack string `yaml:"slack"` // Slack member id (U…/W…), mentioned in Slack messages
}

// Directory maps approver ids (as the policies and --approvers name
// them) to how to reach them: --approver-directory.
type Directory map[string]Person

// slackID is a Slack member id as Slack writes them.
var slackID = regexp.MustCompile(`^[UW][A-Z0-9]{2,}$`)

// LoadDirectory reads an approver directory, YAML or JSON:
//
//	alice: {name: Alice Liddell, email: alice@example.com, slack: U012AB3CD}
//
// Unknown keys, bad addresses and Slack ids are errors naming the
// approver and, for YAML, the line.
func LoadDirectory(path string) (Directory, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	dec.KnownFields(true)
	var d Directory
	if err := dec.Decode(&d); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: the file is empty", path)
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(d) == 0 {
		return nil, fmt.Errorf("%s: lists no approvers", path)
	}
	for id, p := range d {
		if strings.TrimSpace(id) == "" {
			return nil, fmt.Errorf("%s: an empty approver id", path)
		}
		if p.Email == "" && p.Slack == "" {
			return nil, fmt.Errorf("%s: %s: neither email nor slack", path, id)
		}
		if p.Email != "" {
			if err := checkAddress(p.Email); err != nil {
				return nil, fmt.Errorf("%s: %s: email: %w", path, id, err)
			}
		}
		if p.Slack != "" && !slackID.MatchString(p.Slack) {
			return nil, fmt.Errorf("%s: %s: slack %q is not a Slack member id (U… or W…, as the profile's \"Copy member ID\" gives)", path, id, p.Slack)
		}
		if strings.ContainsFunc(p.Name, printable.Unsafe) {
			return nil, fmt.Errorf("%s: %s: name has control characters", path, id)
		}
	}
	return d, nil
}

// checkAddress accepts a bare address, alice@example.com: a display name
// belongs in name, and anything else could smuggle a second recipient.
func checkAddress(s string) error {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return fmt.Errorf("%q is not a plain e-mail address (alice@example.com)", s)
	}
	return nil
}
