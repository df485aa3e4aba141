package policies

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/bundle"
	"github.com/open-policy-agent/opa/v1/keys"
)

// DefaultMaxBundleBytes bounds a bundle when Options.MaxBundleBytes is
// zero: both the .tar.gz as read or downloaded and what it expands to, so
// that neither a huge body nor a gzip bomb can exhaust memory.
const DefaultMaxBundleBytes = 64 << 20

// isBundle reports whether a --policy path names an OPA bundle (what
// `opa build` writes) rather than a .rego file.
func isBundle(path string) bool {
	return strings.HasSuffix(path, ".tar.gz") || strings.HasSuffix(path, ".tgz")
}

// loadedBundle is one OPA bundle read, verified and split into what a
// policy set is built from.
type loadedBundle struct {
	name     string   // the file or URL, for messages and Files
	revision string   // the manifest's revision, or a content hash when it has none
	roots    []string // the manifest's roots: the parts of data it owns
	modules  []source // its .rego files (not its _test.rego ones), named name + path in the bundle
	data     map[string]any
	etag     string // the server's ETag, for a downloaded bundle
}

// BundleVerification is how bundle signatures are checked, as opa run's
// --verification-key, --verification-key-id, --signing-alg and --scope.
type BundleVerification struct {
	// Key is the PEM public key (RSA, ECDSA) or the HMAC secret, as the
	// file holds it (opa uses the file's bytes as they are).
	Key string
	// KeyID is the id the signature must name; "default" when empty.
	KeyID string
	// Algorithm is the signing algorithm; RS256 when empty.
	Algorithm string
	// Scope, when set, must equal the signature's scope claim.
	Scope string
}

// LoadBundleVerification reads a verification key file: a PEM public key
// or an HMAC secret (for HS256/384/512), checked here so that a wrong
// file is refused at start rather than at the first bundle.
func LoadBundleVerification(keyFile, keyID, alg, scope string) (*BundleVerification, error) {
	raw, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, &LoadError{File: keyFile, Err: unwrapPathError(err)}
	}
	v := &BundleVerification{Key: string(raw), KeyID: keyID, Algorithm: alg, Scope: scope}
	if v.KeyID == "" {
		v.KeyID = "default"
	}
	if v.Algorithm == "" {
		v.Algorithm = "RS256"
	}
	if !keys.IsSupportedAlgorithm(v.Algorithm) {
		return nil, fmt.Errorf("unsupported signing algorithm %q", v.Algorithm)
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, &LoadError{File: keyFile, Err: errors.New("the key file is empty")}
	}
	if !strings.HasPrefix(v.Algorithm, "HS") {
		block, _ := pem.Decode(raw)
		if block == nil {
			return nil, &LoadError{File: keyFile, Err: fmt.Errorf("not a PEM public key (%s needs one; an HMAC secret goes with HS256)", v.Algorithm)}
		}
		if _, err := x509.ParsePKIXPublicKey(block.Bytes); err != nil {
			if _, cerr := x509.ParseCertificate(block.Bytes); cerr != nil {
				if _, rerr := x509.ParsePKCS1PublicKey(block.Bytes); rerr != nil {
					return nil, &LoadError{File: keyFile, Err: fmt.Errorf("not a public key: %w", err)}
				}
			}
		}
	}
	return v, nil
}

// config is the OPA verification config for v; nil when v is nil, which
// makes OPA refuse signed bundles ("verification key not provided") and
// accept unsigned ones, as opa run does without --verification-key.
func (v *BundleVerification) config() *bundle.VerificationConfig {
	if v == nil {
		return nil
	}
	kc := &keys.Config{Key: v.Key, Algorithm: v.Algorithm, Scope: v.Scope}
	return bundle.NewVerificationConfig(map[string]*keys.Config{v.KeyID: kc}, v.KeyID, v.Scope, nil)
}

// readBundleFile reads a bundle named in --policy.
func readBundleFile(path string, opts *Options) (*loadedBundle, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &LoadError{File: path, Err: unwrapPathError(err)}
	}
	defer f.Close()
	raw, err := readLimited(f, opts.maxBundleBytes())
	if err != nil {
		return nil, &LoadError{File: path, Err: err}
	}
	b, err := parseBundle(path, raw, opts)
	if err != nil {
		return nil, &LoadError{File: path, Err: err}
	}
	return b, nil
}

// errTooLarge is wrapped by the error of a bundle over the size limit.
var errTooLarge = errors.New("bundle too large")

// readLimited reads r whole, failing when it holds more than limit bytes.
func readLimited(r io.Reader, limit int64) ([]byte, error) {
	raw, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(raw)) > limit {
		return nil, fmt.Errorf("%w: more than %d bytes", errTooLarge, limit)
	}
	return raw, nil
}

// parseBundle reads a .tar.gz bundle with OPA's bundle reader, which
// checks its signature against opts.Verification and that its policies
// and data stay inside its manifest's roots.
func parseBundle(name string, raw []byte, opts *Options) (*loadedBundle, error) {
	limit := opts.maxBundleBytes()
	// OPA's reader bounds each file, not their sum: count what the
	// archive expands to first, so a gzip bomb is refused unread.
	zr, err := gzip.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("not a .tar.gz bundle: %w", err)
	}
	n, err := io.Copy(io.Discard, io.LimitReader(zr, limit+1))
	if err != nil {
		return nil, fmt.Errorf("not a .tar.gz bundle: %w", err)
	}
	if n > limit {
		return nil, fmt.Errorf("%w: expands to more than %d bytes", errTooLarge, limit)
	}

	r := bundle.NewCustomReader(bundle.NewTarballLoaderWithBaseURL(bytes.NewReader(raw), "")).
		WithBundleVerificationConfig(opts.Verification.config()).
		WithRegoVersion(ast.RegoV1).
		WithProcessAnnotations(true).
		WithSizeLimitBytes(limit)
	b, err := r.Read()
	if err != nil {
		if strings.Contains(err.Error(), "verification key not provided") {
			return nil, fmt.Errorf("%w (the bundle is signed: give its key with --bundle-verification-key)", err)
		}
		return nil, err
	}
	switch {
	case b.Type() == bundle.DeltaBundleType:
		return nil, errors.New("delta bundles are not supported; serve a snapshot bundle (opa build)")
	case len(b.WasmModules) > 0 || len(b.PlanModules) > 0:
		return nil, errors.New("the bundle holds wasm or plan modules, which fulfiller does not run; build it with the default target (rego)")
	}
	lb := &loadedBundle{name: name, revision: b.Manifest.Revision, data: b.Data}
	if b.Manifest.Roots != nil {
		lb.roots = *b.Manifest.Roots
	}
	if lb.data == nil {
		lb.data = map[string]any{}
	}
	for _, m := range b.Modules {
		// Test files are for `fulfiller test`, as in a directory.
		if isTestFile(m.Path) {
			continue
		}
		lb.modules = append(lb.modules, source{path: name + "/" + strings.TrimPrefix(m.Path, "/"), data: m.Raw})
	}
	if lb.revision == "" {
		lb.revision = bundleHash(lb)
	}
	return lb, nil
}

// bundleHash identifies a bundle without a manifest revision by content,
// like revision does for files.
func bundleHash(lb *loadedBundle) string {
	data, _ := json.Marshal(lb.data) // sorted keys: the same data, the same bytes
	srcs := append([]source(nil), lb.modules...)
	sum := sha256.Sum256(data)
	srcs = append(srcs, source{path: "data.json", data: []byte(hex.EncodeToString(sum[:]))})
	return revision(srcs, nil)
}

// checkOwnership enforces what a bundle's manifest roots mean in OPA: the
// bundle owns those parts of data. Bundles whose roots overlap are refused,
// as opa refuses to activate them. Where opa would silently erase a --data
// document or a .rego file under a bundle's roots, fulfiller refuses it
// too: a policy author's file must not vanish without a word.
func checkOwnership(bundles []*loadedBundle, regos []source, modules []*ast.Module, fileData map[string]any, owner map[string]string) error {
	for i, a := range bundles {
		for _, b := range bundles[i+1:] {
			for _, ra := range a.roots {
				for _, rb := range b.roots {
					if bundle.RootPathsOverlap(ra, rb) {
						return &LoadError{File: b.name, Err: fmt.Errorf("its manifest root %q overlaps root %q of %s", rb, ra, a.name)}
					}
				}
			}
		}
	}
	for _, b := range bundles {
		for i, m := range modules {
			pkg := strings.TrimPrefix(m.Package.Path.String(), "data.")
			pkg = strings.ReplaceAll(pkg, ".", "/")
			if bundle.RootPathsContain(b.roots, pkg) {
				return &LoadError{File: regos[i].path, Err: fmt.Errorf("package %s is inside the manifest roots %q of bundle %s, which owns that part of data", m.Package.Path, b.roots, b.name)}
			}
		}
		for _, root := range b.roots {
			if p, ok := dataUnder(fileData, root); ok {
				return &LoadError{File: ownerOf(owner, "data."+p), Err: fmt.Errorf("it sets data.%s, inside the manifest roots %q of bundle %s, which owns that part of data", p, b.roots, b.name)}
			}
		}
	}
	return nil
}

// dataUnder reports whether data holds anything at or below root (a
// slash-separated path; "" is all of data), and where.
func dataUnder(data map[string]any, root string) (string, bool) {
	root = strings.Trim(root, "/")
	if root == "" {
		for k := range data {
			return k, true
		}
		return "", false
	}
	var node any = data
	for _, seg := range strings.Split(root, "/") {
		obj, ok := node.(map[string]any)
		if !ok {
			return "", false
		}
		if node, ok = obj[seg]; !ok {
			return "", false
		}
	}
	return strings.ReplaceAll(root, "/", "."), true
}
