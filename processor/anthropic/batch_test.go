package anthropic

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/lab/fakekit"
	"github.com/stetlabs/stet/processor"
	"github.com/stetlabs/stet/processor/anthropic/anthropicfake"
	"github.com/stetlabs/stet/processor/processortest"
)

// jobID returns a job ID shaped like stet.NewID's.
func jobID(n int) string { return fmt.Sprintf("job_01JBATCHTEST%013d", n) }

// batchItems returns n items with distinct prompts.
func batchItems(n int) []stet.BatchItem {
	items := make([]stet.BatchItem, n)
	for i := range items {
		p := testParams(fmt.Sprintf("Classify report %d: the pharmacy was closed.", i))
		p.JobID = jobID(i)
		items[i] = stet.BatchItem{JobID: p.JobID, Params: p}
	}
	return items
}

// submit submits items and fails the test on an error.
func submit(t *testing.T, c *Client, items []stet.BatchItem) *stet.BatchHandle {
	t.Helper()
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_01TEST", Items: items})
	if err != nil {
		t.Fatalf("SubmitBatch() = %v, want success", err)
	}
	return h
}

// cappedClient is an HTTP client like the one stet batch status uses: it
// refuses redirects (refuse says how), has a timeout and caps bodies at
// 1 MiB.
func cappedClient(refuse func(*http.Request, []*http.Request) error) *http.Client {
	return &http.Client{
		Timeout:       20 * time.Second,
		CheckRedirect: refuse,
		Transport:     processortest.CappedTransport{Limit: 1 << 20},
	}
}

// freshConnections returns a client with a transport of its own. net/http
// resends a GET, once, when a reused keep-alive connection drops before any
// answer; a first connection is never resent on.
func freshConnections() *http.Client { return &http.Client{Transport: &http.Transport{}} }

func useLastResponse(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

var errNoRedirects = errors.New("redirects are not followed")

func refuseRedirect(*http.Request, []*http.Request) error { return errNoRedirects }

// batchClient returns a Client for f; hc may be nil.
func batchClient(t *testing.T, f *anthropicfake.Server, toolUse bool, hc *http.Client) *Client {
	t.Helper()
	c, err := New(Config{Common: processor.Common{ID: "anthropic-batch", BaseURL: f.URL(), APIKey: testKey, Model: testModel, Timeout: 10 * time.Second, HTTPClient: hc}, ToolUse: toolUse})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestBatchRequestGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		golden  string
		toolUse bool
	}{
		{name: "output_config", golden: "batch_create.golden.json"},
		{name: "tool use", golden: "batch_create_tool.golden.json", toolUse: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts, last := recordRequests()
			f := newFake(t, opts)
			c := batchClient(t, f, tt.toolUse, nil)
			first := testParams("Classify the report below.\n\nReport: patient <b>[EMAIL]</b> says the dose & timing felt wrong.")
			first.JobID = "job_01JBATCHGOLDEN000000000000A"
			second := testParams("Classify the report below.\n\nReport: the nurse was kind.")
			second.JobID = "job_01JBATCHGOLDEN000000000000B"
			second.Repair = []stet.RepairTurn{{Output: []byte(`{"category":"maybe"}`), Problems: []string{`/category: value must be one of "ok", "harmful", "medical_advice"`}}}
			items := []stet.BatchItem{{JobID: first.JobID, Params: first}, {JobID: second.JobID, Params: second}}
			submit(t, c, items)

			batches := f.Batches()
			if len(batches) != 1 {
				t.Fatalf("fake holds %d batches, want 1", len(batches))
			}
			b := batches[0]
			processortest.GoldenJSON(t, tt.golden, b.Body)

			header := b.Requests[0].Header
			if auth := header.Get("Authorization"); auth != "Bearer "+testKey {
				t.Errorf("Authorization header = %q, want the configured key as a bearer token", auth)
			}
			if header.Get("anthropic-version") == "" {
				t.Errorf("anthropic-version header missing")
			}
			if n := header.Get("X-Stainless-Retry-Count"); n != "0" {
				t.Errorf("X-Stainless-Retry-Count = %q, want 0", n)
			}
			if !slices.Equal(b.CustomIDs, []string{first.JobID, second.JobID}) {
				t.Errorf("custom_ids = %v, want the job IDs in order", b.CustomIDs)
			}
			// Each item's params are what Extract sends for the same params.
			for i, it := range items {
				if _, err := c.Extract(t.Context(), it.Params); err != nil {
					t.Fatalf("Extract() = %v, want success", err)
				}
				if sync := last().Body; !bytes.Equal(b.Requests[i].Body, sync) {
					t.Errorf("item %d params =\n%s\nwant the sync request body\n%s", i, b.Requests[i].Body, sync)
				}
			}
		})
	}
}

func TestBatchStateMapping(t *testing.T) {
	t.Parallel()
	tests := []struct {
		status    string
		cancelled bool
		want      stet.BatchState
		wantErr   bool
	}{
		{status: "in_progress", want: stet.BatchInProgress},
		{status: "canceling", cancelled: true, want: stet.BatchInProgress},
		{status: "ended", want: stet.BatchCompleted},
		{status: "ended", cancelled: true, want: stet.BatchCancelled},
		{status: "", wantErr: true},
		{status: "archived", wantErr: true},
		{status: "ENDED", wantErr: true},
	}
	for _, tt := range tests {
		got, err := batchState(tt.status, tt.cancelled)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("batchState(%q, %v) = %q, %v; want %q, error %v", tt.status, tt.cancelled, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestBatchItemErrorClassification(t *testing.T) {
	t.Parallel()
	body := func(typ, msg, code string) string {
		details := ""
		if code != "" {
			details = `,"details":{"error_code":"` + code + `"}`
		}
		return `{"type":"error","error":{"type":"` + typ + `","message":"` + msg + `"` + details + `},"request_id":"req_011Item"}`
	}
	tests := []struct {
		name      string
		raw       string
		wantClass stet.FailureClass
		wantCode  string
	}{
		{"invalid request", body("invalid_request_error", "messages.0: bad", ""), stet.FailureUnsupported, "invalid_request_error"},
		{"credit exhausted", body("invalid_request_error", "Your credit balance is too low to access the Anthropic API.", ""), stet.FailureQuota, "invalid_request_error"},
		{"overloaded", body("overloaded_error", "Overloaded", ""), stet.FailureTransient, "overloaded_error"},
		{"api error", body("api_error", "Internal server error", ""), stet.FailureTransient, "api_error"},
		{"timeout", body("timeout_error", "Request timed out.", ""), stet.FailureTransient, "timeout_error"},
		{"rate limit", body("rate_limit_error", "slow down", ""), stet.FailureRateLimited, "rate_limit_error"},
		{"spend limit", body("rate_limit_error", "monthly spend limit", "enforced_spend_limit_reached"), stet.FailureQuota, "enforced_spend_limit_reached"},
		{"billing", body("billing_error", "pay up", ""), stet.FailureQuota, "billing_error"},
		{"authentication", body("authentication_error", "invalid x-api-key", ""), stet.FailureAuth, "authentication_error"},
		{"permission", body("permission_error", "no", ""), stet.FailureAuth, "permission_error"},
		{"not found", body("not_found_error", "model: x", ""), stet.FailureUnsupported, "not_found_error"},
		{"too large", body("request_too_large", "too big", ""), stet.FailureUnsupported, "request_too_large"},
		{"unknown type", body("brand_new_error", "?", ""), stet.FailureTransient, "brand_new_error"},
		{"free-text type", body("the report says X", "?", ""), stet.FailureTransient, ""},
		{"not JSON", `<html>`, stet.FailureTransient, ""},
	}
	for _, tt := range tests {
		pe := itemError(json.RawMessage(tt.raw))
		if pe.Class != tt.wantClass || pe.Code != tt.wantCode || pe.StatusCode != 0 {
			t.Errorf("itemError(%s) = class %q code %q status %d, want %q %q 0", tt.name, pe.Class, pe.Code, pe.StatusCode, tt.wantClass, tt.wantCode)
		}
	}
}

func TestSubmitBatchCallsBeforeCreateFirst(t *testing.T) {
	t.Parallel()
	f := newFake(t, anthropicfake.Options{})
	c := batchClient(t, f, false, nil)
	var (
		calls    int
		gotFile  = "unset"
		atCreate anthropicfake.BatchCounts
	)
	items := batchItems(3)
	h, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{
		BatchID:     "bat_01TEST",
		Items:       items,
		InputFileID: "file_ignored", // Anthropic takes requests inline: nothing to reuse
		BeforeCreate: func(_ context.Context, fileID string) error {
			calls++
			gotFile = fileID
			atCreate = f.BatchCounts()
			return nil
		},
	})
	if err != nil {
		t.Fatalf("SubmitBatch() = %v, want success", err)
	}
	if calls != 1 || gotFile != "" {
		t.Errorf("BeforeCreate called %d times with file %q, want once with \"\"", calls, gotFile)
	}
	if atCreate.CreateCalls != 0 {
		t.Errorf("creating calls when BeforeCreate ran = %d, want 0", atCreate.CreateCalls)
	}
	got := f.BatchCounts()
	if got.CreateCalls != 1 || got.Created != 1 || got.Uploads != 0 {
		t.Errorf("counts after submit = %+v, want 1 creating call, 1 batch, no upload", got)
	}
	batches := f.Batches()
	if len(batches) != 1 || h.ProviderID != batches[0].ID {
		t.Fatalf("SubmitBatch() = %+v, fake holds %+v; want the one batch's ID", h, batches)
	}
	if h.State != stet.BatchInProgress || h.RequestCount != 3 || h.InputFileID != "" || !strings.HasPrefix(h.RequestID, "req_") || h.CreatedAt.IsZero() {
		t.Errorf("SubmitBatch() = %+v, want in_progress, 3 requests, no file, a request ID and a creation time", h)
	}
}

func TestSubmitBatchAborts(t *testing.T) {
	t.Parallel()
	errLedger := errors.New("ledger unavailable")
	noSchema := batchItems(2)
	noSchema[1].Params.Schema = nil
	badID := batchItems(2)
	badID[0].JobID = "job/../1"
	dup := batchItems(2)
	dup[1].JobID = dup[0].JobID
	tests := []struct {
		name       string
		items      []stet.BatchItem
		before     error
		wantErr    error
		wantCode   string
		wantBefore int
	}{
		// A failing BeforeCreate is processortest's; this one also checks
		// that its error comes back as it was.
		{name: "BeforeCreate fails", items: batchItems(2), before: errLedger, wantErr: errLedger, wantBefore: 1},
		{name: "no items", items: nil, wantCode: "empty_batch"},
		{name: "item without schema", items: noSchema, wantCode: "invalid_schema"},
		{name: "job ID not a custom_id", items: badID, wantCode: "invalid_custom_id"},
		{name: "duplicate job ID", items: dup, wantCode: "duplicate_custom_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, anthropicfake.Options{})
			c := batchClient(t, f, false, nil)
			calls := 0
			_, err := c.SubmitBatch(t.Context(), stet.BatchSubmit{BatchID: "bat_01TEST", Items: tt.items, BeforeCreate: func(context.Context, string) error {
				calls++
				return tt.before
			}})
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("SubmitBatch() = %v, want %v", err, tt.wantErr)
			}
			if tt.wantCode != "" {
				var pe *stet.ProcessorError
				if !errors.As(err, &pe) || pe.Class != stet.FailureUnsupported || pe.Code != tt.wantCode {
					t.Errorf("SubmitBatch() = %v, want unsupported code %s", err, tt.wantCode)
				}
			}
			if calls != tt.wantBefore {
				t.Errorf("BeforeCreate calls = %d, want %d", calls, tt.wantBefore)
			}
			if got := f.BatchCounts(); got.CreateCalls != 0 || got.Created != 0 || len(f.Batches()) != 0 {
				t.Errorf("fake after an aborted submit: %+v, %d batches; want nothing created or called", got, len(f.Batches()))
			}
		})
	}
}

// offsetClock is a fake clock: now plus an adjustable offset.
type offsetClock struct{ offset atomic.Int64 }

func (c *offsetClock) now() time.Time      { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *offsetClock) set(d time.Duration) { c.offset.Store(int64(d)) }
func (c *offsetClock) opts() anthropicfake.BatchOptions {
	return anthropicfake.BatchOptions{Now: c.now}
}

func TestFindBatchAfterInterruptedSubmit(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		fault       anthropicfake.Fault
		deadline    time.Duration // the caller's deadline; 0: none
		wantCreated int
	}{
		{name: "created then connection reset", fault: anthropicfake.Fault{Kind: anthropicfake.CreateThenDisconnect}, wantCreated: 1},
		{name: "created then no answer until the caller gives up", fault: anthropicfake.Fault{Kind: anthropicfake.CreateThenHang}, deadline: 300 * time.Millisecond, wantCreated: 1},
		{name: "refused with 529", fault: anthropicfake.Fault{Kind: anthropicfake.Overloaded}, wantCreated: 0},
		{name: "dropped before anything was created", fault: anthropicfake.Fault{Kind: anthropicfake.Disconnect}, wantCreated: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clock := &offsetClock{}
			f := newFake(t, anthropicfake.Options{Batch: clock.opts()})
			c := batchClient(t, f, false, nil)

			// Noise: an older batch of the same size and a newer one of
			// another size.
			clock.set(-time.Hour)
			submit(t, c, batchItems(4))
			clock.set(0)
			submit(t, c, batchItems(2))

			f.EnqueueBatchFaults(anthropicfake.RouteBatchCreate, tt.fault)
			submittedAt := time.Now()
			ctx := t.Context()
			if tt.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tt.deadline)
				defer cancel()
			}
			_, err := c.SubmitBatch(ctx, stet.BatchSubmit{BatchID: "bat_01TEST", Items: batchItems(4)})
			if got := stet.ClassOf(err); got != stet.FailureTransient {
				t.Fatalf("interrupted SubmitBatch() = %v (class %q), want a transient failure", err, got)
			}
			before := f.BatchCounts()
			if before.Created != 2+tt.wantCreated {
				t.Fatalf("batches created = %d, want %d", before.Created, 2+tt.wantCreated)
			}

			found, err := c.FindBatch(t.Context(), stet.BatchQuery{BatchID: "bat_01TEST", SubmittedAt: submittedAt, ItemCount: 4})
			if err != nil {
				t.Fatalf("FindBatch() = %v, want success", err)
			}
			var want []string
			if tt.wantCreated == 1 {
				batches := f.Batches()
				want = []string{batches[len(batches)-1].ID}
			}
			var got []string
			for _, h := range found {
				got = append(got, h.ProviderID)
				if h.RequestCount != 4 || h.State != stet.BatchInProgress || h.CreatedAt.Before(submittedAt.Add(-findBatchSkew)) {
					t.Errorf("FindBatch() handle %+v, want 4 requests, in_progress, created in the window", h)
				}
			}
			if !slices.Equal(got, want) {
				t.Errorf("FindBatch() = %v, want %v", got, want)
			}
			after := f.BatchCounts()
			if after.Created != before.Created || after.CreateCalls != before.CreateCalls {
				t.Errorf("FindBatch() changed the fake's creations: %+v → %+v", before, after)
			}
			if after.ListCalls == 0 {
				t.Errorf("FindBatch() made no list call")
			}
		})
	}
}

func TestFindBatchPagesAndFails(t *testing.T) {
	t.Parallel()
	f := newFake(t, anthropicfake.Options{})
	c := batchClient(t, f, false, nil)
	submittedAt := time.Now()
	target := submit(t, c, batchItems(3))
	// 105 newer batches of another size push the target onto page two.
	for range 105 {
		submit(t, c, batchItems(1))
	}
	found, err := c.FindBatch(t.Context(), stet.BatchQuery{SubmittedAt: submittedAt, ItemCount: 3})
	if err != nil {
		t.Fatalf("FindBatch() = %v, want success", err)
	}
	if len(found) != 1 || found[0].ProviderID != target.ProviderID {
		t.Errorf("FindBatch() = %+v, want only %s", found, target.ProviderID)
	}
	if n := f.BatchCounts().ListCalls; n != 2 {
		t.Errorf("list calls = %d, want 2 pages", n)
	}

	// A failed listing is an error, never "none found".
	f.EnqueueBatchFaults(anthropicfake.RouteBatchList, anthropicfake.Fault{Kind: anthropicfake.ServerError})
	found, err = c.FindBatch(t.Context(), stet.BatchQuery{SubmittedAt: submittedAt, ItemCount: 3})
	if got := stet.ClassOf(err); got != stet.FailureTransient || found != nil {
		t.Errorf("FindBatch() with a 500 on list = %v, %v; want nil and a transient error", found, err)
	}
	// A 429 on the second page: the first answers normally.
	f.EnqueueBatchFaults(anthropicfake.RouteBatchList, anthropicfake.Fault{Kind: anthropicfake.Delay}, anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: "4"})
	found, err = c.FindBatch(t.Context(), stet.BatchQuery{SubmittedAt: submittedAt, ItemCount: 3})
	if found != nil {
		t.Errorf("FindBatch() with a 429 on page two = %v, want nil", found)
	}
	var pe *stet.ProcessorError
	if !errors.As(err, &pe) || pe.Class != stet.FailureRateLimited || pe.RetryAfter != 4*time.Second {
		t.Errorf("FindBatch() with a 429 on list = %v, want rate_limited with RetryAfter 4s", err)
	}
	for _, q := range []stet.BatchQuery{{ItemCount: 3}, {SubmittedAt: submittedAt}} {
		if _, err := c.FindBatch(t.Context(), q); stet.ClassOf(err) != stet.FailureUnsupported {
			t.Errorf("FindBatch(%+v) = %v, want unsupported", q, err)
		}
	}
	if got := f.BatchCounts(); got.Created != 106 || got.CreateCalls != 106 {
		t.Errorf("counts = %+v, want the 106 batches the test created and no more", got)
	}
}

func TestBatchStatus(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 3, 4, 7, 28, 0, 0, time.UTC)
	capped := func() *http.Client { return cappedClient(useLastResponse) }
	// A row's With, when set, makes the lookup's HTTP client.
	processortest.BatchStatusHarness[anthropicfake.Fault, func() *http.Client]{
		Open: func(t *testing.T, client func() *http.Client) processortest.BatchLookup[anthropicfake.Fault] {
			f := newFake(t, anthropicfake.Options{Batch: anthropicfake.BatchOptions{PollsToEnd: -1}})
			h := submit(t, batchClient(t, f, false, nil), batchItems(2))
			var hc *http.Client
			if client != nil {
				hc = client()
			}
			c := batchClient(t, f, false, hc)
			c.now = func() time.Time { return now }
			return processortest.BatchLookup[anthropicfake.Fault]{
				Processor:  c,
				ProviderID: h.ProviderID,
				Script:     func(ft anthropicfake.Fault) { f.EnqueueBatchFaults(anthropicfake.RouteBatchRetrieve, ft) },
				Check: func(t *testing.T, st *stet.BatchStatus, pe *stet.ProcessorError) {
					if n := f.BatchCounts().RedirectsFollowed; n != 0 {
						t.Errorf("redirects followed = %d, want 0", n)
					}
					if pe != nil {
						return
					}
					if st.ProviderID != h.ProviderID || st.ProviderState != "in_progress" || st.State != stet.BatchInProgress || st.Total != 2 {
						t.Errorf("BatchStatus() = %+v, want %s in_progress, 2 requests", st, h.ProviderID)
					}
					if !json.Valid(st.Raw) || !bytes.Contains(st.Raw, []byte(`"processing_status":"in_progress"`)) {
						t.Errorf("BatchStatus().Raw = %.200q, want the message_batch body", st.Raw)
					}
				},
			}
		},
	}.Run(t, []processortest.BatchStatusCase[anthropicfake.Fault, func() *http.Client]{
		{Name: "ok", Status: 200},
		{Name: "ok through a capped client", With: capped, Status: 200},
		{Name: "429 retry-after seconds", Fault: &anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: "7"}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 7 * time.Second},
		{Name: "429 retry-after HTTP-date", Fault: &anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: now.Add(30 * time.Second).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 30 * time.Second},
		{Name: "429 retry-after-ms", Fault: &anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfterMS: 1500}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 1500 * time.Millisecond},
		{Name: "429 retry-after a year ahead is capped", Fault: &anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: now.Add(365 * 24 * time.Hour).Format(http.TimeFormat)}, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: processor.MaxRetryAfter},
		{Name: "429 through a capped client", Fault: &anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: "9"}, With: capped, Class: stet.FailureRateLimited, Status: 429, Code: "rate_limit_error", RetryAfter: 9 * time.Second},
		{Name: "404 unknown batch", ID: "msgbatch_01Unknown", Class: stet.FailureUnsupported, Status: 404, Code: "batch_not_found"},
		{Name: "not a batch ID", ID: "../v1/messages", Class: stet.FailureUnsupported, Code: "batch_not_found"},
		{Name: "401", Fault: &anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 401}, Class: stet.FailureAuth, Status: 401, Code: "authentication_error"},
		{Name: "500", Fault: &anthropicfake.Fault{Kind: anthropicfake.ServerError}, Class: stet.FailureTransient, Status: 500, Code: "api_error"},
		{Name: "529", Fault: &anthropicfake.Fault{Kind: anthropicfake.Overloaded}, Class: stet.FailureTransient, Status: 529, Code: "overloaded_error"},
		{Name: "connection reset", Fault: &anthropicfake.Fault{Kind: anthropicfake.Disconnect}, With: freshConnections, Class: stet.FailureTransient},
		{Name: "redirect, last response kept", Fault: &anthropicfake.Fault{Kind: anthropicfake.Redirect}, With: capped, Class: stet.FailureTransient, Status: 302, Code: "redirect"},
		{Name: "redirect refused with an error", Fault: &anthropicfake.Fault{Kind: anthropicfake.Redirect}, With: func() *http.Client { return cappedClient(refuseRedirect) }, Class: stet.FailureTransient, Status: 302, Code: "redirect"},
		{Name: "huge body through a capped client", Fault: &anthropicfake.Fault{Kind: anthropicfake.HugeBody}, With: capped, Class: stet.FailureTransient, Status: 200},
		{Name: "huge body without a cap", Fault: &anthropicfake.Fault{Kind: anthropicfake.HugeBody}, Status: 200},
	})
}

func TestBatchStatusRawAndFields(t *testing.T) {
	t.Parallel()
	f := newFake(t, anthropicfake.Options{})
	rt := &processortest.RecordingTransport{}
	c := batchClient(t, f, false, rt.Client())
	h := submit(t, c, batchItems(3))
	st, err := c.BatchStatus(t.Context(), h.ProviderID)
	if err != nil {
		t.Fatalf("BatchStatus() = %v, want success", err)
	}
	_, header, body := rt.Last()
	if !bytes.Equal(st.Raw, body) {
		t.Errorf("BatchStatus().Raw = %s, want the body as received %s", st.Raw, body)
	}
	if st.RequestID != header.Get("request-id") || st.StatusCode != 200 {
		t.Errorf("BatchStatus() request ID %q status %d, want %q 200", st.RequestID, st.StatusCode, header.Get("request-id"))
	}
	var wire struct {
		CreatedAt  time.Time `json:"created_at"`
		ResultsURL string    `json:"results_url"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		t.Fatal(err)
	}
	want := stet.BatchStatus{ProviderID: h.ProviderID, ProviderState: "ended", State: stet.BatchCompleted, Total: 3, Succeeded: 3, ResultsURL: f.URL() + "/v1/messages/batches/" + h.ProviderID + "/results"}
	if st.ProviderID != want.ProviderID || st.ProviderState != want.ProviderState || st.State != want.State || st.Total != want.Total || st.Succeeded != want.Succeeded || st.Failed != 0 || st.ResultsURL != want.ResultsURL || wire.ResultsURL != want.ResultsURL {
		t.Errorf("BatchStatus() = %+v, want %+v", st, want)
	}
	if wantExp := wire.CreatedAt.Add(29 * 24 * time.Hour); !st.ResultsExpireAt.Equal(wantExp) {
		t.Errorf("ResultsExpireAt = %v, want created_at + 29 days = %v", st.ResultsExpireAt, wantExp)
	}
}

// resultSummary is what a user checks of one result.
type resultSummary struct {
	Class  stet.FailureClass
	Code   string
	Output string
}

func summarize(results []stet.BatchResult) map[string]resultSummary {
	out := map[string]resultSummary{}
	for _, r := range results {
		s := resultSummary{Class: stet.ClassOf(r.Err)}
		var pe *stet.ProcessorError
		if errors.As(r.Err, &pe) {
			s.Code = pe.Code
		}
		if r.Extraction != nil {
			s.Output = string(r.Extraction.Output)
		}
		out[r.JobID] = s
	}
	return out
}

func TestBatchResultsMixed(t *testing.T) {
	t.Parallel()
	ok := fakekit.MinimalInstance(json.RawMessage(testSchema))
	scripts := map[int]anthropicfake.BatchItemScript{
		1: {Outcome: anthropicfake.ItemInvalidJSON},
		2: {Outcome: anthropicfake.ItemRefusal, Message: "I can't help with that."},
		3: {Outcome: anthropicfake.ItemExpired},
		4: {Outcome: anthropicfake.ItemErrored, ErrorType: "invalid_request_error", Message: "messages.0.content: bad"},
		5: {Outcome: anthropicfake.ItemErrored, ErrorType: "overloaded_error"},
		6: {Outcome: anthropicfake.ItemMaxTokens},
		7: {Outcome: anthropicfake.ItemCanceled},
		8: {Outcome: anthropicfake.ItemMissing},
		9: {Outcome: anthropicfake.ItemSucceeded, Answer: `{"category":"harmful","flags":["dose"],"confidence":0.9}`},
	}
	want := map[string]resultSummary{
		jobID(0): {Output: ok},
		jobID(1): {Class: stet.FailureInvalidOutput},
		jobID(2): {Class: stet.FailureRefusal, Code: "refusal"},
		jobID(3): {Class: stet.FailureTransient, Code: stet.CodeBatchItemExpired},
		jobID(4): {Class: stet.FailureUnsupported, Code: "invalid_request_error"},
		jobID(5): {Class: stet.FailureTransient, Code: "overloaded_error"},
		jobID(6): {Class: stet.FailureInvalidOutput, Code: "max_tokens"},
		jobID(7): {Class: stet.FailureTransient, Code: stet.CodeBatchItemCancelled},
		jobID(9): {Output: `{"category":"harmful","flags":["dose"],"confidence":0.9}`},
	}
	for _, toolUse := range []bool{false, true} {
		t.Run(fmt.Sprint("tool use ", toolUse), func(t *testing.T) {
			t.Parallel()
			items := map[string]anthropicfake.BatchItemScript{}
			for i, s := range scripts {
				items[jobID(i)] = s
			}
			f := newFake(t, anthropicfake.Options{Batch: anthropicfake.BatchOptions{Items: items}})
			c := batchClient(t, f, toolUse, nil)
			h := submit(t, c, batchItems(10))
			st, err := c.BatchStatus(t.Context(), h.ProviderID)
			if err != nil || st.State != stet.BatchCompleted {
				t.Fatalf("BatchStatus() = %+v, %v; want completed on the first poll", st, err)
			}
			if st.Total != 10 || st.Succeeded != 5 || st.Failed != 5 {
				t.Errorf("BatchStatus() counts total %d succeeded %d failed %d, want 10, 5, 5", st.Total, st.Succeeded, st.Failed)
			}

			first, err := c.BatchResults(t.Context(), st)
			if err != nil {
				t.Fatalf("BatchResults() = %v, want success", err)
			}
			if got := summarize(first); !mapsEqual(got, want) {
				t.Errorf("BatchResults() =\n%v\nwant\n%v", got, want)
			}
			for _, r := range first {
				switch {
				case r.JobID == jobID(0):
					e := r.Extraction
					if e == nil || e.Model != testModel || !strings.HasPrefix(e.RequestID, "msg_") || e.InputTokens <= 0 || e.OutputTokens <= 0 {
						t.Errorf("BatchResults() ok item = %+v, want model, the message ID and token counts", e)
					}
					if e != nil && (!json.Valid(e.Raw) || !bytes.Contains(e.Raw, []byte(`"custom_id":"`+jobID(0)+`"`))) {
						t.Errorf("ok item Raw = %s, want its results line", e.Raw)
					}
				case r.JobID == jobID(1):
					var pe *stet.ProcessorError
					if errors.As(r.Err, &pe) && (len(pe.Output) == 0 || len(pe.Problems) != 1) {
						t.Errorf("invalid item: Output %q Problems %q, want the invalid answer and one problem", pe.Output, pe.Problems)
					}
				case r.JobID == jobID(4):
					var pe *stet.ProcessorError
					if errors.As(r.Err, &pe) && !strings.HasPrefix(pe.RequestID, "req_") {
						t.Errorf("errored item RequestID = %q, want the error's request_id", pe.RequestID)
					}
				}
			}

			second, err := c.BatchResults(t.Context(), st)
			if err != nil {
				t.Fatalf("second BatchResults() = %v, want success", err)
			}
			if !mapsEqual(summarize(second), summarize(first)) {
				t.Errorf("second BatchResults() = %v, want the first's %v", summarize(second), summarize(first))
			}
			for i := range first {
				if first[i].Extraction != nil && (second[i].Extraction == nil || !bytes.Equal(first[i].Extraction.Raw, second[i].Extraction.Raw)) {
					t.Errorf("item %s: second fetch Raw differs", first[i].JobID)
				}
			}
			got := f.BatchCounts()
			wantCounts := anthropicfake.BatchCounts{CreateCalls: 1, Created: 1, StatusCalls: 1, ResultsFetches: 2}
			if got != wantCounts {
				t.Errorf("fake counts = %+v, want %+v", got, wantCounts)
			}
		})
	}
}

func mapsEqual(a, b map[string]resultSummary) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestBatchResultsWholeBatch(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		setup     func(f *anthropicfake.Server, id string)
		wantState stet.BatchState
		wantClass stet.FailureClass
		wantCode  string
	}{
		{
			name: "every item errored",
			setup: func(f *anthropicfake.Server, _ string) {
				f.ScriptAllBatchItems(anthropicfake.BatchItemScript{Outcome: anthropicfake.ItemErrored, ErrorType: "api_error"})
			},
			wantState: stet.BatchCompleted, wantClass: stet.FailureTransient, wantCode: "api_error",
		},
		{
			name: "every item expired",
			setup: func(f *anthropicfake.Server, _ string) {
				f.ScriptAllBatchItems(anthropicfake.BatchItemScript{Outcome: anthropicfake.ItemExpired})
			},
			wantState: stet.BatchCompleted, wantClass: stet.FailureTransient, wantCode: stet.CodeBatchItemExpired,
		},
		{
			name: "cancelled",
			setup: func(f *anthropicfake.Server, id string) {
				req, _ := http.NewRequest(http.MethodPost, f.URL()+"/v1/messages/batches/"+id+"/cancel", nil)
				req.Header.Set("x-api-key", testKey)
				req.Header.Set("anthropic-version", "2023-06-01")
				res, err := http.DefaultClient.Do(req)
				if err != nil || res.StatusCode != 200 {
					panic(fmt.Sprintf("cancel: %v %v", res, err))
				}
				res.Body.Close()
			},
			wantState: stet.BatchCancelled, wantClass: stet.FailureTransient, wantCode: stet.CodeBatchItemCancelled,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, anthropicfake.Options{Batch: anthropicfake.BatchOptions{PollsToEnd: 3}})
			c := batchClient(t, f, false, nil)
			h := submit(t, c, batchItems(3))
			tt.setup(f, h.ProviderID)
			var st *stet.BatchStatus
			for range 3 {
				var err error
				if st, err = c.BatchStatus(t.Context(), h.ProviderID); err != nil {
					t.Fatalf("BatchStatus() = %v", err)
				}
				if st.State.Terminal() {
					break
				}
				if _, err := c.BatchResults(t.Context(), st); stet.ClassOf(err) != stet.FailureUnsupported {
					t.Errorf("BatchResults() before the end = %v, want unsupported", err)
				}
			}
			if st.State != tt.wantState {
				t.Fatalf("BatchStatus() after 3 polls = %q (%s), want %q", st.State, st.ProviderState, tt.wantState)
			}
			results, err := c.BatchResults(t.Context(), st)
			if err != nil || len(results) != 3 {
				t.Fatalf("BatchResults() = %d results, %v; want 3", len(results), err)
			}
			for _, r := range results {
				var pe *stet.ProcessorError
				if !errors.As(r.Err, &pe) || pe.Class != tt.wantClass || pe.Code != tt.wantCode {
					t.Errorf("BatchResults() item %s = %v, want %s code %s", r.JobID, r.Err, tt.wantClass, tt.wantCode)
				}
			}
			if n := f.BatchCounts().ResultsFetches; n != 1 {
				t.Errorf("results fetches = %d, want 1 (none before the end)", n)
			}
		})
	}
}

func TestBatchResultsFetchFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		fault      anthropicfake.Fault
		client     func() *http.Client
		wantClass  stet.FailureClass
		wantStatus int
		wantCode   string
	}{
		{name: "429", fault: anthropicfake.Fault{Kind: anthropicfake.RateLimit, RetryAfter: "2"}, wantClass: stet.FailureRateLimited, wantStatus: 429, wantCode: "rate_limit_error"},
		{name: "500", fault: anthropicfake.Fault{Kind: anthropicfake.ServerError}, wantClass: stet.FailureTransient, wantStatus: 500, wantCode: "api_error"},
		{name: "404", fault: anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 404}, wantClass: stet.FailureUnsupported, wantStatus: 404, wantCode: "batch_not_found"},
		{name: "redirect", fault: anthropicfake.Fault{Kind: anthropicfake.Redirect}, client: func() *http.Client { return cappedClient(useLastResponse) }, wantClass: stet.FailureTransient, wantStatus: 302, wantCode: "redirect"},
		{name: "over the cap", fault: anthropicfake.Fault{Kind: anthropicfake.HugeBody}, client: func() *http.Client { return cappedClient(useLastResponse) }, wantClass: stet.FailureTransient, wantStatus: 200},
		{name: "connection reset", fault: anthropicfake.Fault{Kind: anthropicfake.Disconnect}, client: freshConnections, wantClass: stet.FailureTransient},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, anthropicfake.Options{})
			var hc *http.Client
			if tt.client != nil {
				hc = tt.client()
			}
			setup := batchClient(t, f, false, nil)
			h := submit(t, setup, batchItems(2))
			st, err := setup.BatchStatus(t.Context(), h.ProviderID)
			if err != nil {
				t.Fatal(err)
			}
			c := batchClient(t, f, false, hc)
			f.EnqueueBatchFaults(anthropicfake.RouteBatchResults, tt.fault)
			_, err = c.BatchResults(t.Context(), st)
			var pe *stet.ProcessorError
			if !errors.As(err, &pe) {
				t.Fatalf("BatchResults() = %v, want a *stet.ProcessorError", err)
			}
			if pe.Class != tt.wantClass || pe.StatusCode != tt.wantStatus || pe.Code != tt.wantCode {
				t.Errorf("BatchResults() = class %q status %d code %q, want %q %d %q (cause %v)", pe.Class, pe.StatusCode, pe.Code, tt.wantClass, tt.wantStatus, tt.wantCode, pe.Err)
			}
			// The fault is spent: the next fetch reads the results.
			if results, err := c.BatchResults(t.Context(), st); err != nil || len(results) != 2 {
				t.Errorf("BatchResults() after the fault = %d results, %v; want 2", len(results), err)
			}
		})
	}
}

func TestReadResultsLines(t *testing.T) {
	t.Parallel()
	c, err := New(Config{Common: processor.Common{ID: "x", Model: testModel}})
	if err != nil {
		t.Fatal(err)
	}
	msg := `{"id":"msg_01A","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"{\"a\":1}"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":2}}`
	tests := []struct {
		name    string
		file    string
		want    []string // job IDs, in order
		wantErr bool
	}{
		{name: "lines in any order, no final newline", file: `{"custom_id":"b","result":{"type":"expired"}}` + "\n" + `{"custom_id":"a","result":{"type":"succeeded","message":` + msg + `}}`, want: []string{"b", "a"}},
		{name: "blank lines and CRLF", file: "\r\n" + `{"custom_id":"a","result":{"type":"canceled"}}` + "\r\n\n", want: []string{"a"}},
		{name: "repeated custom_id kept once", file: `{"custom_id":"a","result":{"type":"expired"}}` + "\n" + `{"custom_id":"a","result":{"type":"canceled"}}`, want: []string{"a"}},
		{name: "line without custom_id left out", file: `{"result":{"type":"expired"}}` + "\n" + `{"custom_id":"a","result":{"type":"expired"}}`, want: []string{"a"}},
		{name: "unknown result type", file: `{"custom_id":"a","result":{"type":"vanished"}}`, want: []string{"a"}},
		{name: "cut file", file: `{"custom_id":"a","result":{"type":"exp`, wantErr: true},
		{name: "empty file", file: ``, want: nil},
	}
	for _, tt := range tests {
		results, err := c.readResults(strings.NewReader(tt.file), 200)
		if (err != nil) != tt.wantErr {
			t.Errorf("readResults(%s) error = %v, want error %v", tt.name, err, tt.wantErr)
			continue
		}
		var got []string
		for _, r := range results {
			got = append(got, r.JobID)
			if (r.Err == nil) == (r.Extraction == nil) {
				t.Errorf("readResults(%s): item %s has Err %v and Extraction %v, want exactly one", tt.name, r.JobID, r.Err, r.Extraction)
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("readResults(%s) = %v, want %v", tt.name, got, tt.want)
		}
	}
	// An unknown result type is a transient failure of that item.
	results, _ := c.readResults(strings.NewReader(`{"custom_id":"a","result":{"type":"vanished"}}`), 200)
	if got := stet.ClassOf(results[0].Err); got != stet.FailureTransient {
		t.Errorf("unknown result type: class %q, want transient", got)
	}
}

func TestBatchCanaryNeverInErrors(t *testing.T) {
	t.Parallel()
	const marker = "CANARY Jane Roe 555-0100"
	// A refusal and an errored item quoting the marker are processortest's.
	f := newFake(t, anthropicfake.Options{Batch: anthropicfake.BatchOptions{Items: map[string]anthropicfake.BatchItemScript{
		jobID(0): {Outcome: anthropicfake.ItemInvalidJSON, Answer: `{"note":"` + marker + `"}`},
		jobID(1): {Outcome: anthropicfake.ItemErrored, ErrorType: marker, Message: marker},
	}}})
	c := batchClient(t, f, false, nil)
	h := submit(t, c, processortest.WithPrompt(batchItems(2), "Classify this report: "+marker))
	if n := f.BatchRequestsContaining(marker); n != 2 {
		t.Fatalf("fake saw the marker in %d batch items, want 2 (the canary must reach the provider)", n)
	}
	f.EnqueueBatchFaults(anthropicfake.RouteBatchRetrieve, anthropicfake.Fault{Kind: anthropicfake.HTTPError, Status: 400, Message: marker, Type: marker, Code: marker})
	_, statusErr := c.BatchStatus(t.Context(), h.ProviderID)
	_, results := processortest.StatusAndResults(t, c, h.ProviderID)
	errs := []error{statusErr}
	for _, r := range results {
		errs = append(errs, r.Err)
	}
	processortest.NoCanaryErrors(t, errs, h.ProviderID)
}
