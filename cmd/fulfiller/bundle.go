package main

import (
	"errors"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/spf13/pflag"

	"github.com/mewkit/fulfiller/policies"
)

// bundleFlags are the OPA bundle flags: how bundles named in --policy
// (run, eval, replay, --shadow-policy) are verified and bounded, and, for
// run, the bundle served over HTTP(S).
type bundleFlags struct {
	verificationKey string
	keyID           string
	signingAlg      string
	scope           string
	maxSize         sizeValue

	url       string // run only
	poll      time.Duration
	tokenFile string
}

// bundleToken is --bundle-token-file: there is no flag for the token
// itself, so that it never sits on a command line.
var bundleToken = secretFlag{flag: "bundle-token", fileFlag: "bundle-token-file"}

// registerVerification adds the flags every command that takes --policy has.
func (b *bundleFlags) registerVerification(f *pflag.FlagSet) {
	b.maxSize = policies.DefaultMaxBundleBytes
	f.StringVar(&b.verificationKey, "bundle-verification-key", "", "verify OPA bundle signatures with the PEM public key or HMAC secret in `FILE` (as opa's --verification-key); bundles must then be signed with it")
	f.StringVar(&b.keyID, "bundle-verification-key-id", "default", "the id of the --bundle-verification-key (as opa's --verification-key-id)")
	f.StringVar(&b.signingAlg, "bundle-signing-alg", "RS256", "the algorithm bundles are signed with (as opa's --signing-alg): RS256, ES256, HS256, …")
	f.StringVar(&b.scope, "bundle-scope", "", "the scope bundle signatures must carry (as opa's --scope)")
	f.Var(&b.maxSize, "bundle-max-size", "largest OPA bundle accepted, compressed and expanded (bytes or 64MiB)")
}

// registerRemote adds run's --bundle-url flags.
func (b *bundleFlags) registerRemote(f *pflag.FlagSet) {
	f.StringVar(&b.url, "bundle-url", "", "also load the OPA bundle served at `URL` (https://, or http:// on loopback), polled with If-None-Match; a broken download keeps the last good policy")
	f.DurationVar(&b.poll, "bundle-poll", policies.DefaultBundlePoll, "mean time between --bundle-url downloads (each jittered ±10%)")
	f.StringVar(&b.tokenFile, "bundle-token-file", "", "send the bearer token in `FILE` with --bundle-url downloads (read once at start, trimmed; never logged)")
}

// validate checks the remote flags; the key file is read by verification.
func (b *bundleFlags) validate() error {
	if b.url == "" {
		if b.tokenFile != "" {
			return usageErrorf("--bundle-token-file needs --bundle-url")
		}
		return nil
	}
	u, err := url.Parse(b.url)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return usageErrorf("--bundle-url %q: want https://host/path (or http:// on loopback)", b.url)
	}
	if u.User != nil {
		return usageErrorf("--bundle-url: credentials in the URL would be logged; use --bundle-token-file")
	}
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) && b.tokenFile != "" {
		return usageErrorf("--bundle-url %s: plain http to a host that is not loopback would send the --bundle-token-file token in clear; use https", b.url)
	}
	if b.poll <= 0 {
		return usageErrorf("--bundle-poll %s: must be positive", b.poll)
	}
	return nil
}

// verification reads --bundle-verification-key; nil without it.
func (b *bundleFlags) verification() (*policies.BundleVerification, error) {
	if b.verificationKey == "" {
		if b.scope != "" {
			return nil, usageErrorf("--bundle-scope needs --bundle-verification-key")
		}
		return nil, nil
	}
	v, err := policies.LoadBundleVerification(b.verificationKey, b.keyID, b.signingAlg, b.scope)
	if err != nil {
		var le *policies.LoadError
		if errors.As(err, &le) {
			return nil, usageErrorf("--bundle-verification-key %v", err)
		}
		return nil, usageErrorf("--bundle-signing-alg: %v", err)
	}
	return v, nil
}

// local fills in how opts verifies and bounds the bundles in --policy.
func (b *bundleFlags) local(opts *policies.Options) error {
	v, err := b.verification()
	if err != nil {
		return err
	}
	opts.Verification, opts.MaxBundleBytes = v, int64(b.maxSize)
	return nil
}

// options fills in the bundle fields of opts: local's, and the remote
// bundle when --bundle-url is set, reporting downloads to obs (nil for
// none).
func (b *bundleFlags) options(log *slog.Logger, opts *policies.Options, obs policies.BundleObserver) error {
	if err := b.local(opts); err != nil {
		return err
	}
	if b.url == "" {
		return nil
	}
	v := opts.Verification
	token, err := bundleToken.resolve(log, "", b.tokenFile)
	if err != nil {
		return err
	}
	u, _ := url.Parse(b.url)
	if u.Scheme == "http" && !loopbackHost(u.Hostname()) {
		// As opa, plain http is allowed; a signature still proves who
		// built the bundle, but anyone on the path can see it and serve
		// an older one.
		log.Warn("--bundle-url uses plain http to a host that is not loopback: anyone on the path can read the policy or serve an older one; use https", "url", b.url)
	}
	if v == nil {
		log.Warn("--bundle-url without --bundle-verification-key: whoever controls the server (or the path to it) controls the policy")
	}
	opts.Remote = &policies.RemoteBundle{URL: b.url, Poll: b.poll, Token: token, Observer: obs}
	return nil
}

// loopbackHost reports whether a URL's host is loopback (see isLoopback).
func loopbackHost(host string) bool { return isLoopback(net.JoinHostPort(host, "0")) }
