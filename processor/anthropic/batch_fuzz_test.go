package anthropic

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/processortest"
)

// FuzzBatchResults: readResults, the decoder of a batch results file,
// never panics on any file, with or without tool use. It fails the whole
// read exactly when a non-blank line is not a results line (the file is
// cut or corrupt); otherwise it reports once on every job a line names,
// as processortest.CheckBatchResults wants (a named job, one outcome, a
// known failure class, no canary in error text, Raw a verbatim line).
func FuzzBatchResults(f *testing.F) {
	canary := processortest.FuzzCanary
	message := func(content string) string {
		return `{"id":"msg_01A","type":"message","role":"assistant","model":"m","content":[` + content + `],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":2}}`
	}
	line := func(id, result string) string { return `{"custom_id":"` + id + `","result":` + result + `}` }
	for _, file := range []string{
		line("a", `{"type":"succeeded","message":`+message(`{"type":"text","text":"{\"a\":1}"}`)+`}`),
		line("a", `{"type":"succeeded","message":`+message(`{"type":"tool_use","id":"toolu_1","name":"record","input":{"note":"`+canary+`"}}`)+`}`),
		line("a", `{"type":"succeeded","message":`+message(`{"type":"text","text":"`+canary+` will not"}`)+`}`),
		line("a", `{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"`+canary+`"},"request_id":"req_1"}}`) + "\n" +
			line("b", `{"type":"errored","error":{"type":"error","error":{"type":"overloaded_error","message":"m"}}}`),
		line("a", `{"type":"expired"}`) + "\r\n\r\n" + line("b", `{"type":"canceled"}`) + "\n" + line("a", `{"type":"canceled"}`),
		line("a", `{"type":"vanished"}`),
		line("", `{"type":"expired"}`),
		line("a", `{"type":"succeeded","message":"not a message"}`),
		`{"custom_id":"a","result":{"type":"exp`,
		``,
	} {
		f.Add([]byte(file))
	}
	var clients []*Client
	for _, toolUse := range []bool{false, true} {
		c, err := New(Config{Common: processor.Common{ID: "anthropic-fuzz", Model: testModel}, ToolUse: toolUse})
		if err != nil {
			f.Fatal(err)
		}
		clients = append(clients, c)
	}
	f.Fuzz(func(t *testing.T, file []byte) {
		corrupt := false
		named := map[string]bool{}
		for l := range strings.Lines(string(file)) {
			l = strings.TrimSpace(l)
			if l == "" {
				continue
			}
			var item resultLine
			if json.Unmarshal([]byte(l), &item) != nil {
				corrupt = true
			} else if item.CustomID != "" {
				named[item.CustomID] = true
			}
		}
		for _, c := range clients {
			results, err := c.readResults(bytes.NewReader(file), 200)
			if (err != nil) != corrupt {
				t.Fatalf("readResults(%q) error = %v; a line is not a results line: %v", file, err, corrupt)
			}
			if err != nil {
				if results != nil {
					t.Fatalf("readResults(%q) = %d results beside error %v", file, len(results), err)
				}
				continue
			}
			if len(results) != len(named) {
				t.Fatalf("readResults(%q) = %d results; the file names %d jobs", file, len(results), len(named))
			}
			processortest.CheckBatchResults(t, file, results, "custom_id")
		}
	})
}
