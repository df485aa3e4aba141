package approval

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"unicode/utf8"

	"github.com/gowebpki/jcs"
)

// ErrNotCanonicalizable means a document cannot be put into RFC 8785 form:
// it is not UTF-8 JSON, or it is outside I-JSON (duplicate keys, lone
// surrogates, numbers beyond IEEE 754 doubles: too large, too small, or
// more precise than one, such as 9007199254740993).
var ErrNotCanonicalizable = errors.New("not canonicalizable JSON")

// Canonical returns the RFC 8785 (JSON Canonicalization Scheme) form of a
// JSON document: keys sorted by UTF-16 code units, no insignificant
// whitespace, ECMAScript number formatting and minimal string escaping.
// Digests and signatures are computed over these bytes, so that the
// fulfiller and an approver's client written in another language agree on
// them whatever key order or spelling the JSON travelled in.
//
// The transformation itself is github.com/gowebpki/jcs. That parser accepts
// some input that is not JSON (01, 1_0), so the document is checked with
// encoding/json first. It writes every number as the IEEE 754 double
// nearest to it, so two numbers that differ but share that double
// (9007199254740993 and 9007199254740992) would share one canonical form
// while a tool reading integers exactly (Python, Jackson, Go's json.Number)
// sees two calls: a number is refused unless its value is that of the
// shortest text of its double, the text RFC 8785 writes for it.
func Canonical(doc []byte) ([]byte, error) {
	if !utf8.Valid(doc) {
		return nil, fmt.Errorf("%w: not UTF-8", ErrNotCanonicalizable)
	}
	if !json.Valid(doc) {
		return nil, fmt.Errorf("%w: not valid JSON", ErrNotCanonicalizable)
	}
	if loneSurrogate(doc) {
		// jcs pairs a high surrogate with whatever \u escape follows, so
		// "\ud800\u002f" and "\ud800\u0041" both came out as U+FFFD: two
		// different documents, one canonical form (and one digest).
		return nil, fmt.Errorf("%w: unpaired surrogate escape", ErrNotCanonicalizable)
	}
	if n, ok := inexactNumber(doc); !ok {
		return nil, fmt.Errorf("%w: the number %.40s is not an IEEE 754 double (I-JSON, RFC 7493 2.2)", ErrNotCanonicalizable, n)
	}
	out, err := jcs.Transform(doc)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotCanonicalizable, err)
	}
	return out, nil
}

// CallDigest is the lowercase hex SHA-256 of the canonical JSON of
// {"method": method, "params": params} ("params": null when the proposal
// had none). It names the exact call a human is asked about: the card shows
// its first 12 digits, and a signed approval covers all of it, so an answer
// cannot be replayed for a look-alike call.
func CallDigest(method string, params json.RawMessage) (string, error) {
	m, err := marshalString(method)
	if err != nil {
		return "", err
	}
	p := bytes.TrimSpace(params)
	if len(p) == 0 {
		p = []byte("null")
	}
	doc := make([]byte, 0, len(m)+len(p)+24)
	doc = append(doc, `{"method":`...)
	doc = append(doc, m...)
	doc = append(doc, `,"params":`...)
	doc = append(doc, p...)
	doc = append(doc, '}')
	c, err := Canonical(doc)
	if err != nil {
		return "", fmt.Errorf("call digest: %w", err)
	}
	sum := sha256.Sum256(c)
	return hex.EncodeToString(sum[:]), nil
}

// ShortDigest is the prefix of a call digest that humans compare: enough
// to tell two look-alike proposals apart at a glance.
func ShortDigest(digest string) string {
	if len(digest) > 12 {
		return digest[:12]
	}
	return digest
}

// loneSurrogate reports whether a valid JSON document has a \u escape of a
// UTF-16 surrogate that is not a high surrogate directly followed by an
// escaped low one. I-JSON, and so RFC 8785, forbids those.
func loneSurrogate(doc []byte) bool {
	inString := false
	for i := 0; i < len(doc); i++ {
		switch c := doc[i]; {
		case c == '"':
			inString = !inString
		case inString && c == '\\':
			if doc[i+1] != 'u' {
				i++ // a two-character escape such as \" or \\
				continue
			}
			r := hexRune(doc[i+2 : i+6])
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return true
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(doc) || doc[i+1] != '\\' || doc[i+2] != 'u' {
					return true
				}
				if lo := hexRune(doc[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return true
				}
				i += 6
			}
		}
	}
	return false
}

// inexactNumber finds, in a valid JSON document, the first number whose
// value is not that of its double's shortest round-trip text: one beyond a
// double's range or precision. ok is true when there is none.
func inexactNumber(doc []byte) (num []byte, ok bool) {
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString:
			if c == '\\' {
				i++ // the escaped character cannot end the string
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '-' || (c >= '0' && c <= '9'):
			j := i + 1
			for j < len(doc) && isNumberByte(doc[j]) {
				j++
			}
			if n := doc[i:j]; !exactDouble(n) {
				return n, false
			}
			i = j - 1
		}
	}
	return nil, true
}

func isNumberByte(c byte) bool {
	return c >= '0' && c <= '9' || c == '.' || c == 'e' || c == 'E' || c == '+' || c == '-'
}

// exactDouble reports whether the JSON number n means the same value as
// the shortest text of the double nearest to it. It compares decimal
// digits and exponents, never building the values, so 1e-999999999 costs
// no more than 1e-9.
func exactDouble(n []byte) bool {
	plain := len(n) <= 15
	for _, c := range n {
		if c < '0' || c > '9' {
			plain = plain && c == '-'
		}
	}
	if plain {
		return true // an integer of at most 15 digits: below 2^53
	}
	f, err := strconv.ParseFloat(string(n), 64)
	if err != nil {
		return false // beyond the largest double
	}
	a, aok := decimalOf(n)
	b, bok := decimalOf(strconv.AppendFloat(nil, f, 'e', -1, 64))
	return aok && bok && a == b
}

// decimal is a number's value as sign, significant digits (no leading or
// trailing zero) and the exponent of the last digit; zero is the zero
// value, whatever its sign.
type decimal struct {
	neg    bool
	digits string
	exp    int
}

// decimalOf reads a JSON number (or strconv's 'e' format). ok is false
// for a non-zero number whose exponent has more than 9 digits: no double
// comes near it.
func decimalOf(n []byte) (d decimal, ok bool) {
	i := 0
	if i < len(n) && n[i] == '-' {
		d.neg = true
		i++
	}
	digits := make([]byte, 0, len(n))
	frac, inFrac := 0, false
	for ; i < len(n) && n[i] != 'e' && n[i] != 'E'; i++ {
		if n[i] == '.' {
			inFrac = true
			continue
		}
		if len(digits) > 0 || n[i] != '0' {
			digits = append(digits, n[i]) // leading zeros dropped
		}
		if inFrac {
			frac++
		}
	}
	if len(digits) == 0 {
		return decimal{}, true
	}
	exp := 0
	if i < len(n) {
		i++ // past the e
		expNeg := n[i] == '-'
		if n[i] == '+' || n[i] == '-' {
			i++
		}
		for i < len(n) && n[i] == '0' {
			i++
		}
		if len(n)-i > 9 {
			return decimal{}, false
		}
		for ; i < len(n); i++ {
			exp = exp*10 + int(n[i]-'0')
		}
		if expNeg {
			exp = -exp
		}
	}
	exp -= frac
	for digits[len(digits)-1] == '0' {
		digits = digits[:len(digits)-1]
		exp++
	}
	d.digits, d.exp = string(digits), exp
	return d, true
}

// hexRune reads four hex digits (already validated as JSON).
func hexRune(h []byte) rune {
	var r rune
	for _, c := range h {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// marshalString is a JSON string without HTML escaping (`<`, `>`, `&`
// need none in JSON): the method is digested as the fulfiller's elicit
// package writes it in the prompt.
func marshalString(s string) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(s); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}
