package eval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"unicode/utf8"
)

// Item is one labelled document.
type Item struct {
	Line       int    // 1-based line in the labels file
	ExternalID string // the document's ID; never logged
	Text       string
	// Expected holds the labelled value of every field the item labels,
	// as JSON.
	Expected map[string]json.RawMessage
	// Split is "dev" or "holdout" (optional): figures are also given per
	// split, so a rules file tuned on dev can be checked on held-out items.
	Split string
	// Tags name the hard cases an item is (optional): negation, sarcasm…
	Tags []string
}

// LineError is a labels line that could not be used. Reason never quotes
// the line.
type LineError struct {
	Line   int
	Reason string
}

func (e LineError) Error() string { return fmt.Sprintf("line %d: %s", e.Line, e.Reason) }

// maxLine bounds one labels line (one document and its labels).
const maxLine = 4 << 20

// LoadLabels reads a JSONL labels file: one {"external_id","text",
// "expected":{…}} object a line (optionally "split" and "tags"); blank
// lines are skipped. Lines that cannot be used are returned by number, and
// the rest are still returned.
func LoadLabels(path string) ([]Item, []LineError, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	return ReadLabels(f)
}

// ReadLabels is LoadLabels over a reader.
func ReadLabels(r io.Reader) ([]Item, []LineError, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLine)
	var items []Item
	var bad []LineError
	first := map[string]int{}
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		it, reason := parseLine(line)
		if reason == "" {
			if prev, dup := first[it.ExternalID]; dup {
				reason = fmt.Sprintf("duplicate external_id (first at line %d)", prev)
			}
		}
		if reason != "" {
			bad = append(bad, LineError{Line: n, Reason: reason})
			continue
		}
		it.Line = n
		first[it.ExternalID] = n
		items = append(items, it)
	}
	if err := sc.Err(); err != nil {
		return items, bad, fmt.Errorf("read labels after line %d: %w", n, err)
	}
	return items, bad, nil
}

func parseLine(line []byte) (Item, string) {
	if !utf8.Valid(line) {
		return Item{}, "not UTF-8"
	}
	var raw struct {
		ExternalID *string                    `json:"external_id"`
		Text       *string                    `json:"text"`
		Expected   map[string]json.RawMessage `json:"expected"`
		Split      string                     `json:"split"`
		Tags       []string                   `json:"tags"`
	}
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&raw); err != nil {
		if strings.Contains(err.Error(), "unknown field") {
			return Item{}, "unknown key (known: external_id, text, expected, split, tags)"
		}
		return Item{}, "not a JSON object of the labels shape"
	}
	if dec.More() {
		return Item{}, "more than one JSON value"
	}
	switch {
	case raw.ExternalID == nil || *raw.ExternalID == "":
		return Item{}, "external_id required"
	case len(*raw.ExternalID) > 256:
		return Item{}, "external_id longer than 256 bytes"
	case raw.Text == nil || strings.TrimSpace(*raw.Text) == "":
		return Item{}, "text required"
	case len(raw.Expected) == 0:
		return Item{}, "expected required: an object with at least one field"
	case raw.Split != "" && raw.Split != SplitDev && raw.Split != SplitHoldout:
		return Item{}, `split must be "dev" or "holdout"`
	}
	for _, v := range raw.Expected {
		if len(v) == 0 || string(v) == "null" {
			return Item{}, "expected: a field is null"
		}
	}
	return Item{ExternalID: *raw.ExternalID, Text: *raw.Text, Expected: raw.Expected, Split: raw.Split, Tags: raw.Tags}, ""
}

// Splits.
const (
	SplitDev     = "dev"
	SplitHoldout = "holdout"
)
