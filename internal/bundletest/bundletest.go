// Package bundletest builds OPA bundles for tests the way `opa build -b DIR`
// and `opa sign` do, with OPA's own bundle package, so that CI needs no opa
// binary.
package bundletest

import (
	"bytes"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/util"
)

// Options say what goes into a bundle besides DIR's files.
type Options struct {
	// Revision is the manifest's revision (opa build --revision).
	Revision string
	// Roots are the manifest's roots; nil for opa's default, all of data.
	Roots []string
	// SigningKey, when set, signs the bundle (opa build --signing-key):
	// a PEM private key for Algorithm, or an HMAC secret.
	SigningKey string
	// Algorithm is the signing algorithm; RS256 when empty.
	Algorithm string
	// KeyID is the signature's key id; "default" when empty, as opa's.
	KeyID string
	// Scope is the signature's scope claim, when set.
	Scope string
}

// Build returns a .tar.gz bundle of the .rego files (tests included, as
// opa build includes them) and the data.json/data.yaml files under dir,
// each data file mounted at its directory's path as opa does.
func Build(t testing.TB, dir string, o Options) []byte {
	t.Helper()
	b := bundle.Bundle{Data: map[string]any{}}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		rel = "/" + filepath.ToSlash(rel)
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch base := filepath.Base(path); {
		case strings.HasSuffix(base, ".rego"):
			b.Modules = append(b.Modules, bundle.ModuleFile{URL: rel, Path: rel, RelativePath: rel, Raw: raw})
		case base == "data.json" || base == "data.yaml" || base == "data.yml":
			var v any
			if err := util.Unmarshal(raw, &v); err != nil {
				return err
			}
			obj := v
			parts := strings.Split(strings.Trim(filepath.ToSlash(filepath.Dir(rel)), "/"), "/")
			for i := len(parts) - 1; i >= 0; i-- {
				if parts[i] != "" {
					obj = map[string]any{parts[i]: obj}
				}
			}
			for k, v := range obj.(map[string]any) {
				b.Data[k] = v
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("bundle of %s: %v", dir, err)
	}
	b.Manifest.Revision = o.Revision
	if o.Roots != nil {
		roots := append([]string(nil), o.Roots...)
		b.Manifest.Roots = &roots
	}
	b.Manifest.Init()
	if o.SigningKey != "" {
		keyID := o.KeyID
		if keyID == "" {
			keyID = "default"
		}
		var claims string
		if o.Scope != "" {
			claims = filepath.Join(t.TempDir(), "claims.json")
			if err := os.WriteFile(claims, []byte(`{"scope":"`+o.Scope+`"}`), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.GenerateSignature(bundle.NewSigningConfig(o.SigningKey, o.Algorithm, claims), keyID, false); err != nil {
			t.Fatalf("sign bundle: %v", err)
		}
	}
	var buf bytes.Buffer
	if err := bundle.NewWriter(&buf).Write(b); err != nil {
		t.Fatalf("write bundle: %v", err)
	}
	return buf.Bytes()
}

// WriteFile writes data to a new file name under a temporary directory
// and returns its path.
func WriteFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// RSAKey returns a new RSA key pair as PEM: the private key to sign with
// and the public key file contents to verify with.
func RSAKey(t testing.TB) (private, public string) {
	t.Helper()
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})),
		string(pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}
