package mcpfront

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// The scanner takes what encoding/json takes (the SDK's reader), and
// calls strict only what a strict decoding reads as the lenient one
// does.
func TestScannerAgreesWithTheDecoders(t *testing.T) {
	for _, c := range []struct {
		text  string
		loose bool // valid, but a strict reader refuses it or might read it otherwise
	}{
		{`{}`, false},
		{` {"a" : [1, -0.5e+3, true, false, null, "x\"\\\/\b\f\n\r\t\u00e9"] } `, false},
		{`{"a":{"b":1,"b":2}}`, true},
		{`{"a":1,"a":1}`, true},
		{`[{"a":1},{"a":1}]`, false},
		{"{\"a\":\"\xff\"}", true},
		{`{"a":"\ud800"}`, true},
		{`{"\u0061":1,"a":2}`, true},
		{`{"é":"ü"}`, false},
		{`"s"`, false},
		{`-0`, false},
	} {
		var s scanner
		if !s.scanText([]byte(c.text)) {
			t.Errorf("%s: not scanned", c.text)
			continue
		}
		if !json.Valid([]byte(c.text)) {
			t.Errorf("%s: scanned, but encoding/json refuses it", c.text)
		}
		if s.loose != c.loose {
			t.Errorf("%s: loose %v, want %v", c.text, s.loose, c.loose)
		}
		var v any
		if err := jsonv2.Unmarshal([]byte(c.text), &v); !s.loose && err != nil {
			t.Errorf("%s: strict, but a strict decoding refuses it: %v", c.text, err)
		}
	}
	for _, text := range []string{
		``, `{`, `{"a"}`, `{"a":}`, `{"a":1,}`, `[1,]`, `01`, `1.`, `.5`, `1e`, `-`, `tru`, `nul`,
		`{"a":1}}`, `{"a":1} x`, "\"a\tb\"", `"\x"`, `"\u12g4"`, `{'a':1}`, `{"a":1}{}`,
	} {
		var s scanner
		if s.scanText([]byte(text)) {
			t.Errorf("%q: scanned", text)
		}
		if json.Valid([]byte(text)) {
			t.Errorf("%q: the test is wrong, encoding/json takes it", text)
		}
	}
	// An object of more names than the linear check compares keeps
	// finding duplicates.
	var b strings.Builder
	b.WriteString(`{`)
	for i := range 3 * maxLinearNames {
		b.WriteString(`"k` + strings.Repeat("x", i) + `":1,`)
	}
	wide := b.String()
	var s scanner
	if !s.scanText([]byte(wide+`"y":1}`)) || s.loose {
		t.Error("a wide object without duplicates: loose")
	}
	if !s.scanText([]byte(wide+`"kx":1}`)) || !s.loose {
		t.Error("a wide object with a duplicate past the linear check: not loose")
	}
}

// feedReader yields its chunks one Read at a time.
type feedReader struct{ chunks []string }

func (r *feedReader) Read(p []byte) (int, error) {
	if len(r.chunks) == 0 {
		return 0, io.EOF
	}
	n := copy(p, r.chunks[0])
	if r.chunks[0] = r.chunks[0][n:]; r.chunks[0] == "" {
		r.chunks = r.chunks[1:]
	}
	return n, nil
}

// frames runs readFrames over chunks, with limit: the frames its hook
// took (those with an "id" of 1 or "t"), what it left to the SDK, and
// the stream's end.
func frames(t *testing.T, limit int, chunks ...string) (took []string, left string, end error) {
	t.Helper()
	pr, pw := io.Pipe()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		readFrames(&feedReader{chunks: chunks}, limit, pw, func(f *inFrame) bool {
			if string(f.id) == `1` || string(f.id) == `"t"` {
				took = append(took, string(f.raw))
				return true
			}
			return false
		})
	}()
	b, err := io.ReadAll(pr)
	wg.Wait()
	return took, string(b), err
}

// A frame split across reads, two in one read, blank lines and CRLF
// endings: each frame is offered whole, once, and what the hook leaves
// reaches the SDK as it came.
func TestReadFramesAcrossReads(t *testing.T) {
	one := `{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a b","arguments":{}}}`
	two := `{"jsonrpc":"2.0","id":2,"method":"ping"}`
	three := `{"jsonrpc":"2.0","id":"t","method":"x"}`
	all := one + "\n\n" + two + "\r\n" + "  " + three + "\n" + two
	var bytewise []string
	for i := range len(all) {
		bytewise = append(bytewise, all[i:i+1])
	}
	for name, chunks := range map[string][]string{
		"one read":       {all},
		"byte by byte":   bytewise,
		"split in a key": {all[:20], all[20:100], all[100:]},
	} {
		t.Run(name, func(t *testing.T) {
			took, left, err := frames(t, 0, chunks...)
			if err != nil {
				t.Errorf("the stream ended with %v, want none", err)
			}
			if len(took) != 2 || took[0] != one || took[1] != three {
				t.Errorf("took %q, want %q and %q", took, one, three)
			}
			// The last frame has no newline: the SDK's decoder takes it so.
			if want := two + "\r\n" + two + "\n"; left != want {
				t.Errorf("left %q, want %q", left, want)
			}
		})
	}
}

// What the line-by-line pass cannot frame is read by encoding/json's
// decoder, as the SDK's transport reads it: a frame over several lines
// still reaches the hook; trailing data, two values on a line, a frame
// that is no JSON, and an oversized one end the stream with an error.
func TestReadFramesFallsBackToTheDecoder(t *testing.T) {
	pretty := "{\"jsonrpc\": \"2.0\",\n \"id\": 1,\n \"method\": \"tools/call\"}"
	after := `{"jsonrpc":"2.0","id":"t","method":"x"}`
	took, left, err := frames(t, 0, pretty+"\n"+after+"\n")
	if err != nil || left != "" || len(took) != 2 || took[0] != pretty || took[1] != after {
		t.Errorf("took %q, left %q, end %v; want both frames taken", took, left, err)
	}
	for name, c := range map[string]struct {
		stream string
		limit  int
		want   string
	}{
		"trailing data":             {`{"id":2} x` + "\n", 0, "invalid trailing data"},
		"two on a line":             {`{"id":2}{"id":3}` + "\n", 0, "invalid trailing data"},
		"not JSON":                  {`{"id":2,}` + "\n", 0, "invalid character"},
		"oversized":                 {`{"id":2,"x":"` + strings.Repeat("a", 100) + `"}` + "\n", 64, errFrameTooLarge.Error()},
		"oversized, no newline yet": {`{"id":2,"x":"` + strings.Repeat("a", 100), 64, errFrameTooLarge.Error()},
	} {
		_, _, err := frames(t, c.limit, `{"id":"t"}`+"\n", c.stream)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: the stream ended with %v, want %q", name, err, c.want)
		}
	}
	// A frame at the limit is read.
	at := `{"id":1,"x":"` + strings.Repeat("a", 64-len(`{"id":1,"x":""}`)) + `"}`
	if took, _, err := frames(t, 64, at+"\n"); len(took) != 1 || !errors.Is(err, nil) {
		t.Errorf("a frame of the limit's length: took %q, end %v", took, err)
	}
}

// The frames the Front writes itself are the bytes the SDK's encoding
// writes; an id or a result it would write otherwise is left to it.
func TestFramesWrittenAsTheSDKWritesThem(t *testing.T) {
	result := []byte(`{"content":[{"type":"text","text":"<a & b>"}]}`)
	for _, raw := range []any{float64(7), float64(-3), "x", "a<b>&c", "fulfiller:1"} {
		id, err := jsonrpc.MakeID(raw)
		if err != nil {
			t.Fatal(err)
		}
		want, err := jsonrpc.EncodeMessage(&jsonrpc.Response{ID: id, Result: result})
		if err != nil {
			t.Fatal(err)
		}
		got, ok := appendResult(nil, id, result)
		if !ok || string(got) != string(want)+"\n" {
			t.Errorf("id %v: wrote %s (%v), the SDK %s", raw, got, ok, want)
		}
	}
	for _, raw := range []any{"é", "a\"b", "a\\b", "\u2028"} {
		id, _ := jsonrpc.MakeID(raw)
		if got, ok := appendResult(nil, id, result); ok {
			t.Errorf("id %q: wrote %s, want it left to the SDK", raw, got)
		}
	}
	id, _ := jsonrpc.MakeID(float64(1))
	if got, ok := appendResult(nil, id, []byte("{\n}")); ok {
		t.Errorf("a result over two lines: wrote %q", got)
	}
	params := []byte(`{"name":"add","arguments":{"a":1}}`)
	rid, _ := jsonrpc.MakeID("fulfiller:9")
	want, _ := jsonrpc.EncodeMessage(&jsonrpc.Request{ID: rid, Method: "tools/call", Params: params})
	if got, ok := appendCall(nil, "fulfiller:9", "tools/call", params); !ok || string(got) != string(want)+"\n" {
		t.Errorf("call: wrote %s (%v), the SDK %s", got, ok, want)
	}
	// Arguments proposed with whitespace are sent compacted, as the
	// SDK's encoding sent them.
	if got, err := callParamsJSON(nil, "add", json.RawMessage("{ \"a\" :\n 1 }")); err != nil || string(got) != `{"name":"add","arguments":{"a":1}}` {
		t.Errorf("callParamsJSON with spaced arguments: %s, %v", got, err)
	}
}

// A result of the sessionless revision names the server in its _meta:
// made when there is none (or it is null), added to one that names
// other keys, left alone when it names a server already; the rest of
// the result's bytes as they came.
func TestAnnotateSplicesServerInfo(t *testing.T) {
	u := &upstream{serverInfo: json.RawMessage(`{"name":"calc","version":"1"}`)}
	const si = `"io.modelcontextprotocol/serverInfo":{"name":"calc","version":"1"}`
	for in, want := range map[string]string{
		`{"content":[],"z":1}`:        `{"_meta":{` + si + `},"content":[],"z":1}`,
		`{}`:                          `{"_meta":{` + si + `}}`,
		`{"content":[],"_meta":null}`: `{"content":[],"_meta":{` + si + `}}`,
		`{"_meta":{},"content":[]}`:   `{"_meta":{` + si + `},"content":[]}`,
		`{"content":[],"_meta":{"k":"v","a":[1]}}`:                       `{"content":[],"_meta":{"k":"v","a":[1],` + si + `}}`,
		`{"_meta":{` + si + `},"content":[]}`:                            `{"_meta":{` + si + `},"content":[]}`,
		`{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}}}`: `{"_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}}}`,
	} {
		got, err := u.annotate(json.RawMessage(in), nil)
		if err != nil || string(got) != want {
			t.Errorf("annotate(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	// What the splice does not read is decoded as before: a _meta that
	// is not an object is an error, an escaped name is still read.
	if got, err := u.annotate(json.RawMessage(`{"_meta":"x"}`), nil); err == nil {
		t.Errorf("a _meta that is a string: %s, want an error", got)
	}
	if got, err := u.annotate(json.RawMessage(`{"_met\u0061":{"k":1}}`), nil); err != nil || string(got) != `{"_meta":{`+si+`,"k":1}}` {
		t.Errorf("an escaped _meta: %s, %v", got, err)
	}
}

// A call's _meta is decoded as jsonv2 decodes it into an any; what
// decodeAny leaves to jsonv2 (an escape, a number out of range) it says
// so.
func TestDecodeAnyAgreesWithJSONv2(t *testing.T) {
	for _, text := range []string{
		`{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"bench","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}`,
		`{"progressToken":7,"a":[1,-2.5e3,true,false,null,"é",[],{}],"b":{"c":{"d":[{"e":0}]}}}`,
		`[]`, `{}`, `"s"`, `0`, `null`,
	} {
		got, ok := decodeAny([]byte(text))
		var want any
		if err := jsonv2.Unmarshal([]byte(text), &want); err != nil {
			t.Fatal(err)
		}
		if !ok || !reflect.DeepEqual(got, want) {
			t.Errorf("decodeAny(%s) = %#v, %v; jsonv2 %#v", text, got, ok, want)
		}
	}
	for _, text := range []string{`{"a\n":1}`, `{"a":"\u00e9"}`, `[1e999]`} {
		if got, ok := decodeAny([]byte(text)); ok {
			t.Errorf("decodeAny(%s) = %#v, want it left to jsonv2", text, got)
		}
	}
}

// allFrames is every frame r yields through read (readFrames, or
// legacyFrames alone), all taken by the hook, and whether the stream
// ended with an error other than its end.
func allFrames(read func(io.Reader, int, *io.PipeWriter, frameHook), r io.Reader, limit int) (got []string, failed bool) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		read(r, limit, pw, func(f *inFrame) bool {
			got = append(got, string(f.raw))
			return true
		})
	}()
	_, err := io.ReadAll(pr)
	<-done
	return got, err != nil
}

// The line-by-line reader yields the frames encoding/json's decoder
// yields (the SDK's reader), and fails where it fails, whatever the
// stream.
func FuzzReadFramesAgreesWithTheDecoder(f *testing.F) {
	for _, seed := range []string{
		"{\"id\":1}\n{\"id\":2}\r\n\n  [1,2]\n",
		"{\"a\":\n1}\n{\"b\":2}\n",
		"{\"a\":1} {\"b\":2}\n",
		"{\"a\":1}\r{\"b\":2}\n",
		"{\"a\":1}{\"b\":2}",
		"{\"a\":\"\\u00e9\"}\n\"s\"\n1\n",
		"{\"a\":1,}\n",
		"{\"a\":1}",
		"",
		"\n\n",
		"{\"a\":[" + strings.Repeat("[", 1001) + strings.Repeat("]", 1001) + "]}\n",
	} {
		f.Add([]byte(seed), 7)
	}
	f.Fuzz(func(t *testing.T, stream []byte, chunk int) {
		if chunk <= 0 || chunk > 64 {
			chunk = 7
		}
		var chunks []string
		for i := 0; i < len(stream); i += chunk {
			chunks = append(chunks, string(stream[i:min(len(stream), i+chunk)]))
		}
		var bytewise []string
		for i := range stream {
			bytewise = append(bytewise, string(stream[i:i+1]))
		}
		got, gotFailed := allFrames(readFrames, &feedReader{chunks: slices.Clone(chunks)}, 0)
		// The SDK's trailing-data check looks at what its decoder has
		// buffered: a value that ends where a read ends is not checked.
		// So its outcome may hang on how the stream was read; the
		// reader's is to be one of its outcomes.
		var outcomes []string
		for _, r := range []io.Reader{strings.NewReader(string(stream)), &feedReader{chunks: slices.Clone(chunks)}, &feedReader{chunks: bytewise}} {
			want, wantFailed := allFrames(legacyFrames, r, 0)
			if gotFailed == wantFailed && reflect.DeepEqual(got, want) {
				return
			}
			outcomes = append(outcomes, fmt.Sprintf("%q (failed %v)", want, wantFailed))
		}
		t.Errorf("stream %q:\nread %q (failed %v)\nthe decoder %s", stream, got, gotFailed, strings.Join(outcomes, " or "))
	})
}

// The scanner takes a text when encoding/json does (short of the depth
// it stops at), and what it calls strict jsonv2 reads (duplicate names,
// invalid UTF-8 refused).
func FuzzScannerAgreesWithTheDecoders(f *testing.F) {
	for _, seed := range []string{`{"a":[1,"\u00e9",{"b":null}]}`, `{"a":1,"a":2}`, "\"\xff\"", `[1e5,-0.1]`, `{"\u0061":1}`, `"\ud800"`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, text []byte) {
		var s scanner
		ok := s.scanText(text)
		if s.deep {
			return
		}
		if ok != json.Valid(text) {
			t.Fatalf("%q: scanned %v, encoding/json %v", text, ok, !ok)
		}
		var v jsontext.Value // a number out of float64's range is a decoding's matter, not the text's
		if err := jsonv2.Unmarshal(text, &v); ok && !s.loose && err != nil {
			t.Fatalf("%q: strict, but jsonv2 refuses it: %v", text, err)
		}
	})
}

// A frame larger than a megabyte grows the reader's buffer; the frames
// after it are read as well once the buffer is let go.
func TestReadFramesAfterALargeFrame(t *testing.T) {
	large := `{"jsonrpc":"2.0","id":1,"result":{"x":"` + strings.Repeat("a", 2<<20) + `"}}`
	small := `{"jsonrpc":"2.0","id":"t","method":"x"}`
	took, left, err := frames(t, 0, large+"\n", small+"\n", small+"\n")
	if err != nil || left != "" || len(took) != 3 || took[0] != large || took[2] != small {
		t.Errorf("took %d frames, left %q, end %v; want the large frame and two small ones", len(took), left, err)
	}
}
