package elicit

import (
	"crypto/ed25519"
	"log/slog"
	"slices"

	"github.com/mewkit/fulfiller/elicit/approval"
	"github.com/mewkit/fulfiller/fulfill"
	"github.com/mewkit/fulfiller/fulfill/lifecycle"
)

// Config is how the humans are asked: who by default, whose answers must
// be signed, what signs the prompts, who is told each step. The core's
// escalation (fulfill.Approvals) runs it; Approvals builds that from it.
type Config struct {
	// DefaultApprovers are asked when a decision names no approvers
	// (--approvers).
	DefaultApprovers []string
	// Keys are the approvers whose answers must be signed
	// (--approver-keys). Answers of other approvers are taken on the
	// gateway's word.
	Keys approval.Keys
	// PromptKey, when set, signs every elicitation/create
	// (--prompt-key): approvers' clients that pin its public key
	// (--fulfiller-keys) show only prompts whose signature verifies, since
	// the gateway does not authenticate from (docs/design.md "Proposer
	// identity and grants").
	PromptKey ed25519.PrivateKey
	// Passkeys are the approvers whose answers must carry a WebAuthn
	// assertion over the approval digest (--approver-keys lines
	// `<id> webauthn <credential>`; docs/protocol.md, "Signed approvals").
	Passkeys approval.Passkeys
	// CurrentKeys, when set, is the approver key set in force now, and
	// Keys and Passkeys are not read: the --approver-keys file reloaded
	// while the fulfiller runs (approverkeys.Watcher.Keys). It must be
	// quick and safe to call from any goroutine, and the set it returns
	// must never change afterwards. An answer is verified under the set in
	// force when it arrives, never under a key since removed or replaced.
	CurrentKeys func() approval.ApproverKeys
	// Observer, when set, is told each step with each human. It is called
	// synchronously and must be quick.
	Observer func(Event)
	// OfferGrants lets escalations whose decision is grantable (and whose
	// quorum is 1) offer a grant on the form.
	OfferGrants bool
	Logger      *slog.Logger // [discard]
}

// Approvals is the core's escalation asking as cfg says, its prompts
// sent from signer (the fulfiller's participant id). DefaultApprovers go
// into fulfill.Config.Approvers, not here.
func (cfg Config) Approvals(signer string) *fulfill.Approvals {
	a := &fulfill.Approvals{Codec: Codec{Signer: signer, PromptKey: cfg.PromptKey, Logger: cfg.Logger}, OfferGrants: cfg.OfferGrants,
		Keys: approval.ApproverKeys{Ed25519: cfg.Keys, Passkeys: cfg.Passkeys}}
	if obs := cfg.Observer; obs != nil {
		a.Observer = func(h lifecycle.Human) { obs(EventOf(h)) }
	}
	if cur := cfg.CurrentKeys; cur != nil {
		a.CurrentKeys = func() lifecycle.KeySet { return cur() }
	}
	return a
}

// LogKeys says what cfg's approver keys are at start, once: with none,
// that an approval is only as trustworthy as the gateway, which does not
// authenticate from; else who must sign and who need not. (A reloaded
// file's count is logged by whoever reloads it.)
func LogKeys(cfg Config) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	keyed := cfg.currentKeys().IDs()
	if len(keyed) == 0 && cfg.CurrentKeys == nil {
		log.Warn("no approver keys configured: approvals are taken on the gateway's word, and the gateway does not authenticate from, so an approval is only as trustworthy as the gateway and everyone in the space (see --approver-keys)")
	} else if len(keyed) == 0 {
		log.Warn("the approver keys file lists no approver yet: approvals are taken on the gateway's word until someone enrols (the file is reloaded when it changes)")
	} else {
		var unkeyed []string
		for _, id := range cfg.DefaultApprovers {
			if !slices.Contains(keyed, id) {
				unkeyed = append(unkeyed, id)
			}
		}
		if len(unkeyed) > 0 {
			log.Warn("approvers without a key: their answers are taken on the gateway's word", "approvers", unkeyed)
		}
		log.Info("signed approvals required", "approvers", keyed)
	}
}
