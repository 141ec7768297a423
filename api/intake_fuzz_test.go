package api

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stetlabs/stet"
)

// FuzzParseBody: ParseBody never panics; what it accepts is valid UTF-8
// text without escaped lone surrogates, and re-encoding what it accepted
// parses to the same thing.
func FuzzParseBody(f *testing.F) {
	for _, b := range []string{
		`{"external_id":"r-1","revision":1,"text":"Patient seen.","metadata":{"site":"a"}}`,
		`{"text":"caf\u00e9 \ud83d\ude00","metadata":null}`,
		`{"text":"lone \ud800 surrogate","external_id":"r-2","revision":2}`,
		`{"text":"real \ufffd kept","external_id":"r-3","revision":3}`,
		`{"text":"x","external_id":"r","revision":"1"}`,
		`{"text":"x","external_id":"r","revision":1.5}`,
		`{"text":"x","external_id":"r","revision":1e0}`,
		`{"TEXT":"upper","External_ID":"r","revision":7}`,
		`{"text":"a","text":"b","external_id":"r","revision":1}`,
		`{"text":"x","external_id":"r","revision":1,"metadata":[1]}`,
		`{"text":"x","external_id":"r","revision":1,"extra":true}`,
		`{"text":"x","external_id":"r","revision":1} {}`,
		`{"text":"   ","external_id":"r","revision":1}`,
		"{\"text\":\"\xff\",\"external_id\":\"r\",\"revision\":1}",
		`{"text":"x","external_id":"a\u0000b","revision":1}`,
		`{"text":"x","external_id":"` + strings.Repeat("e", 257) + `","revision":1}`,
		`{"text":"\ud800","metadata":{"note":"\ufffd"}}`,
		`{"text":"\\ufffd \ud800"}`,
		`{"text":"\\\ufffd \ud800"}`,
	} {
		for mode := range uint8(4) {
			f.Add([]byte(b), mode)
		}
	}
	f.Fuzz(func(t *testing.T, body []byte, mode uint8) {
		src := &Source{ID: "s", Tenant: "t", Identity: stet.IdentityModes[mode%2], Revisions: stet.RevisionModes[mode/2%2]}
		p, berr := src.ParseBody(body)
		if berr != nil {
			if berr.Status < 400 || berr.Slug == "" || berr.Detail == "" {
				t.Fatalf("ParseBody(%q) = %+v, want a 4xx with a slug and a detail", body, berr)
			}
			return
		}
		text := p.Text.Reveal()
		if !utf8.ValidString(text) || strings.TrimSpace(text) == "" {
			t.Fatalf("ParseBody(%q) accepted text %q", body, text)
		}
		if raw, ok := lastField(body, "text"); ok && escapedLoneSurrogate(raw) {
			t.Fatalf("ParseBody(%q) accepted text %s, which escapes a lone surrogate", body, raw)
		}

		again := map[string]any{"text": text}
		if src.Identity == stet.IdentityExternalID {
			again["external_id"] = p.ExternalID
		}
		if src.Revisions == stet.RevisionsExplicit {
			again["revision"] = p.Revision
		}
		if p.Metadata != nil {
			again["metadata"] = p.Metadata
		}
		b2, err := json.Marshal(again)
		if err != nil {
			t.Fatalf("re-encode %q: %v", body, err)
		}
		p2, berr := src.ParseBody(b2)
		if berr != nil {
			t.Fatalf("ParseBody(%q) accepted; its re-encoding %q is refused: %v", body, b2, berr)
		}
		if p2.Text.Reveal() != text || p2.ExternalID != p.ExternalID || p2.Revision != p.Revision || !sameJSON(p2.Metadata, p.Metadata) {
			t.Fatalf("ParseBody(%q) = %q %q %d %s; re-encoded = %q %q %d %s", body,
				text, p.ExternalID, p.Revision, p.Metadata, p2.Text.Reveal(), p2.ExternalID, p2.Revision, p2.Metadata)
		}
	})
}

// lastField returns the raw value of the last top-level key that
// encoding/json would decode into the field name (keys match
// case-insensitively; a later key overwrites an earlier one).
func lastField(body []byte, name string) (json.RawMessage, bool) {
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, false
	}
	var found json.RawMessage
	ok := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, false
		}
		if k, _ := tok.(string); strings.EqualFold(k, name) {
			found, ok = raw, true
		}
	}
	return found, ok
}

// escapedLoneSurrogate reports whether the JSON string raw holds a \u escape
// of a surrogate that is not half of a high-low pair.
func escapedLoneSurrogate(raw []byte) bool {
	s := string(raw)
	for i := 0; i+6 <= len(s); i++ {
		if s[i] != '\\' {
			continue
		}
		if s[i+1] != 'u' {
			i++ // an escaped character, possibly a backslash
			continue
		}
		r := hex4(s[i+2 : i+6])
		switch {
		case r >= 0xd800 && r < 0xdc00:
			if i+12 <= len(s) && s[i+6] == '\\' && s[i+7] == 'u' {
				if lo := hex4(s[i+8 : i+12]); lo >= 0xdc00 && lo < 0xe000 {
					i += 11
					continue
				}
			}
			return true
		case r >= 0xdc00 && r < 0xe000:
			return true
		}
		i += 5
	}
	return false
}

func hex4(s string) rune {
	var r rune
	for i := range len(s) {
		c := rune(s[i] | 0x20)
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | (c - '0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | (c - 'a' + 10)
		default:
			return -1
		}
	}
	return r
}

func sameJSON(a, b json.RawMessage) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	// json.Marshal escapes <, > and & in a RawMessage; compare both so.
	canon := func(m json.RawMessage) []byte {
		var c, e bytes.Buffer
		if json.Compact(&c, m) != nil {
			return nil
		}
		json.HTMLEscape(&e, c.Bytes())
		return e.Bytes()
	}
	ca, cb := canon(a), canon(b)
	return ca != nil && bytes.Equal(ca, cb)
}
