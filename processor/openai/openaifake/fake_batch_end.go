package openaifake

// How a batch ends: its items answered by the sync route's answer logic
// (or as scripted), written to output and error files.

import (
	"bytes"
	"cmp"
	"net/http"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// endBatch answers the batch's items and ends it. fb.mu is held.
func (f *Server) endBatch(b *fakeBatch, now time.Time, end BatchEnd) {
	fb := f.batch
	at := ptr(now.Unix())
	if b.wire.InProgressAt == nil {
		b.wire.InProgressAt = at
	}
	if end == BatchEndFailed {
		b.wire.Status = "failed"
		b.wire.FailedAt = at
		b.wire.Errors = &wireBatchErrors{Object: "list", Data: []wireBatchError{{Code: "batch_failed", Message: "The batch could not be processed."}}}
		return
	}
	var (
		out, errs    bytes.Buffer
		counts       = wireRequestCounts{Total: len(b.lines)}
		usage        = wireBatchUsage{InputTokensDetails: map[string]int{"cached_tokens": 0}, OutputTokensDetails: map[string]int{"reasoning_tokens": 0}}
		itemFallback = Fault{}
	)
	switch end {
	case BatchEndExpired:
		itemFallback = Fault{Kind: ItemExpired}
	case BatchEndCancelled:
		itemFallback = Fault{Kind: ItemCancelled}
	}
	for _, l := range b.lines {
		ft, scripted := fb.items[l.customID]
		if !scripted {
			ft = itemFallback
		}
		line, success, in, outTok := f.batchItem(l, ft)
		if success {
			counts.Completed++
			usage.InputTokens += in
			usage.OutputTokens += outTok
			out.Write(line)
			out.WriteByte('\n')
		} else {
			counts.Failed++
			errs.Write(line)
			errs.WriteByte('\n')
		}
	}
	usage.TotalTokens = usage.InputTokens + usage.OutputTokens
	b.wire.RequestCounts = counts
	b.wire.Usage = &usage
	id := b.wire.ID
	if out.Len() > 0 {
		b.wire.OutputFileID = ptr(fb.addFile(now, "batch_output", id+"_output.jsonl", out.Bytes(), b.outputTTL).ID)
	}
	if errs.Len() > 0 {
		b.wire.ErrorFileID = ptr(fb.addFile(now, "batch_output", id+"_error.jsonl", errs.Bytes(), b.outputTTL).ID)
	}
	b.wire.FinalizingAt = at
	switch end {
	case BatchEndExpired:
		b.wire.Status, b.wire.ExpiredAt = "expired", at
	case BatchEndCancelled:
		if b.wire.CancellingAt == nil {
			b.wire.CancellingAt = at
		}
		b.wire.Status, b.wire.CancelledAt = "cancelled", at
	default:
		b.wire.Status, b.wire.CompletedAt = "completed", at
	}
}

// batchItem answers one batch request as the sync route would, shaped as
// a results line. success says whether it belongs in the output file.
func (f *Server) batchItem(l fakeLine, ft Fault) (line []byte, success bool, inTok, outTok int) {
	wl := wireBatchLine{ID: "batch_req_" + fakekit.RandomHex(16), CustomID: l.customID}
	respond := func(status int, body []byte) {
		wl.Response = &wireBatchResponse{StatusCode: status, RequestID: "req_" + fakekit.RandomHex(16), Body: body}
	}
	req, err := decodeFakeRequest(l.body)
	e, valid := validateFakeRequest(&req)
	answer := func(content, refusal *string, finish string) {
		respond(http.StatusOK, completionBody(req, content, refusal, finish))
		success = true
		inTok, outTok = promptTokens(req), completionTokens(content, refusal)
	}
	switch {
	case err != nil || !valid:
		if err != nil {
			e = apiError{Message: "We could not parse the JSON body of your request.", Type: "invalid_request_error"}
		}
		respond(http.StatusBadRequest, apiErrorBody(e))
	case ft.Kind == ItemExpired:
		wl.Error = &wireItemError{Code: "batch_expired", Message: "This request could not be executed before the completion window expired."}
	case ft.Kind == ItemCancelled:
		wl.Error = &wireItemError{Code: "batch_cancelled", Message: "This request was not executed because the batch was cancelled."}
	case ft.Kind == ItemError:
		wl.Error = &wireItemError{Code: cmp.Or(ft.Code, "request_timeout"), Message: cmp.Or(ft.Message, "The request timed out.")}
	case ft.Kind == "" || ft.Kind == ItemOK:
		answer(f.content(req), nil, "stop")
	case ft.Kind == TruncatedJSON:
		answer(cut(f.content(req)), nil, "stop")
	case ft.Kind == SchemaInvalid:
		answer(ptr(`{"unexpected":true}`), nil, "stop")
	case ft.Kind == Refusal:
		answer(nil, ptr(cmp.Or(ft.Message, "I'm sorry, but I can't assist with that request.")), "stop")
	case ft.Kind == ContentFilter:
		answer(nil, nil, "content_filter")
	case ft.Kind == Length:
		answer(cut(f.content(req)), nil, "length")
	case ft.Kind == RateLimit:
		respond(http.StatusTooManyRequests, apiErrorBody(ft.override(apiError{
			Message: "Rate limit reached for " + req.Model + " in organization org-fake on requests per min (RPM).",
			Type:    "requests",
			Code:    "rate_limit_exceeded",
		})))
	default:
		status, e := errorAnswer(ft)
		respond(status, apiErrorBody(e))
	}
	return fakekit.Marshal(wl), success, inTok, outTok
}
