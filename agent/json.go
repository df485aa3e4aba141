package agent

import (
	jsonv2 "github.com/go-json-experiment/json"
	jsonv1 "github.com/go-json-experiment/json/v1"
)

// wireJSON is encoding/json's behaviour (the v1 options of the package
// that became encoding/json/v2) with one change: object keys match struct
// fields exactly.
var wireJSON = jsonv2.JoinOptions(jsonv1.DefaultOptionsV1(), jsonv2.MatchCaseInsensitiveNames(false))

// Unmarshal decodes JSON that came from the space into v the way the
// space's other readers read it. The gateway checks a sender's
// capabilities against an envelope's "kind" and routes it by "to", and
// every JavaScript participant reads each key exactly as written;
// encoding/json matches keys to struct fields whatever their case, and a
// later match wins, so a chat that also carried "KIND":"system/presence"
// passed the gateway as a chat from a participant allowed nothing else
// and reached us as presence (and "FROM", "TO", … likewise). Here a key
// that differs in case is an unknown key, ignored as everyone else
// ignores it. The rest is encoding/json's: the last of duplicate keys
// wins (as JSON.parse), invalid UTF-8 becomes U+FFFD, and the errors
// read the same. It is also about twice as fast.
//
// v must not hold encoding/json's Number, which this decoder does not
// know (decode into any with json.Decoder.UseNumber instead).
func Unmarshal(data []byte, v any) error {
	return jsonv2.Unmarshal(data, v, wireJSON)
}
