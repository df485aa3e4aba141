package approver

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/mewkit/fulfiller/elicit/approval"
)

// GenerateKey makes an approver's key pair. It returns the private key as
// a PEM file (PKCS #8, so openssl reads it too, with a comment naming the
// approver) and the line that goes into the fulfiller's --approver-keys
// file.
func GenerateKey(id string, rand io.Reader) (privatePEM []byte, publicLine string, err error) {
	return generateKey(id, rand,
		fmt.Sprintf("# fulfiller approver key of %s. Keep it secret: whoever holds it approves as %s.\n", id, id),
		"approver", "# The fulfiller's --approver-keys file needs this line:\n")
}

// GeneratePromptKey makes the key pair a fulfiller signs its prompts with
// (fulfiller run --prompt-key): the same format as an approver's key. It
// returns the private key as a PEM file and the line that goes into each
// approver's --fulfiller-keys file.
func GeneratePromptKey(fulfillerID string, rand io.Reader) (privatePEM []byte, publicLine string, err error) {
	return generateKey(fulfillerID, rand,
		fmt.Sprintf("# fulfiller prompt key of %s. Keep it secret: whoever holds it asks approvers in %s's name.\n", fulfillerID, fulfillerID),
		"fulfiller", "# Each approver's --fulfiller-keys file needs this line:\n")
}

func generateKey(id string, rand io.Reader, header, what, lineHeader string) (privatePEM []byte, publicLine string, err error) {
	if id == "" || strings.ContainsAny(id, " \t\r\n#") {
		return nil, "", fmt.Errorf("%s id %q: must be non-empty, without spaces or #", what, id)
	}
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, "", fmt.Errorf("generate key: %w", err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, "", fmt.Errorf("encode key: %w", err)
	}
	publicLine = id + " " + approval.EncodePublicKey(pub)
	var b strings.Builder
	b.WriteString(header)
	fmt.Fprintf(&b, "%s# %s\n", lineHeader, publicLine)
	if err := pem.Encode(&b, &pem.Block{Type: "PRIVATE KEY", Bytes: der}); err != nil {
		return nil, "", err
	}
	return []byte(b.String()), publicLine, nil
}

// WriteKeyFile generates a key for id and writes it to path, readable by
// its owner only. It never overwrites a file: a lost old key cannot be
// got back.
func WriteKeyFile(path, id string, rand io.Reader) (publicLine string, err error) {
	data, line, err := GenerateKey(id, rand)
	if err != nil {
		return "", err
	}
	return line, writeNew(path, data)
}

// WritePromptKeyFile is WriteKeyFile for a fulfiller's prompt key
// (GeneratePromptKey).
func WritePromptKeyFile(path, fulfillerID string, rand io.Reader) (publicLine string, err error) {
	data, line, err := GeneratePromptKey(fulfillerID, rand)
	if err != nil {
		return "", err
	}
	return line, writeNew(path, data)
}

// writeNew writes data to a new file at path, readable by its owner only.
func writeNew(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// LoadKey reads a private key file written by WriteKeyFile (any PKCS #8
// Ed25519 PEM will do). Like ssh, it refuses a file that others may read.
func LoadKey(path string) (ed25519.PrivateKey, error) {
	if runtime.GOOS != "windows" {
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("%s is readable by others (mode %04o); chmod 600 it", path, fi.Mode().Perm())
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	for {
		var block *pem.Block
		block, data = pem.Decode(data)
		if block == nil {
			return nil, fmt.Errorf("%s: no PRIVATE KEY block", path)
		}
		if block.Type != "PRIVATE KEY" {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, errors.New(path + ": not an Ed25519 key")
		}
		return priv, nil
	}
}

// PublicLine is the --approver-keys line for a private key.
func PublicLine(id string, key ed25519.PrivateKey) string {
	return id + " " + approval.EncodePublicKey(key.Public().(ed25519.PublicKey))
}
