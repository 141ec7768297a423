package geminifake

// How a batch ends: its items answered once, and the Operation the batch
// routes serve.

import (
	"cmp"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/stetlabs/stet/lab/fakekit"
)

// endBatch ends b in state (or its scripted end state) and computes the
// answers, once: later lookups and downloads serve the same output. The
// caller holds the batch lock.
func (f *Server) endBatch(b *fakeBatch, state string) {
	st := &f.batch
	if state == "" {
		state = cmp.Or(st.endScripts[b.displayName], BatchStateSucceeded)
	}
	now := time.Now().UTC()
	b.state, b.ended, b.updated = state, now, now
	if state == BatchStateFailed {
		b.opError = &fakeRPCStatus{Code: 13, Message: "Batch processing failed: an internal error occurred."}
		return
	}
	var lines []byte
	for _, it := range b.items {
		ft, scripted := st.itemScripts[it.key]
		if !scripted {
			switch state {
			case BatchStateExpired:
				ft, scripted = Fault{Kind: BatchItemExpired}, true
			case BatchStateCancelled:
				ft, scripted = Fault{Kind: BatchItemCancelled}, true
			}
		}
		resp, status, omit := f.batchItemAnswer(it.req, ft, scripted)
		if omit {
			continue
		}
		if status != nil {
			b.failed++
		} else {
			b.succeeded++
		}
		if b.inputFile == "" {
			b.inline = append(b.inline, marshal(struct {
				Response json.RawMessage `json:"response,omitempty"`
				Error    *fakeRPCStatus  `json:"error,omitempty"`
				Metadata map[string]any  `json:"metadata,omitempty"`
			}{resp, status, it.metadata}))
			continue
		}
		lines = append(lines, fakekit.Marshal(struct {
			Key      string          `json:"key"`
			Response json.RawMessage `json:"response,omitempty"`
			Error    *fakeRPCStatus  `json:"error,omitempty"`
		}{it.key, resp, status})...)
		lines = append(lines, '\n')
	}
	if b.inputFile != "" {
		name := "files/batch-" + strings.TrimPrefix(b.id, "batches/")
		st.files[name] = &fakeFile{name: name, displayName: name, mime: batchFileMIMEType, data: lines, created: now, results: true}
		b.outputFile = name
	}
}

// batchItemAnswer answers one item: a GenerateContentResponse, an error
// status, or nothing at all.
func (f *Server) batchItemAnswer(req Request, ft Fault, scripted bool) (json.RawMessage, *fakeRPCStatus, bool) {
	if !scripted {
		ft = Fault{Kind: BatchItemOK}
	}
	if cand, feedback, ok := f.answer(req, ft); ok {
		return f.response(req, cand, feedback), nil, false
	}
	fail := func(e apiErrorBody) (json.RawMessage, *fakeRPCStatus, bool) {
		e = ft.override(e)
		return nil, &fakeRPCStatus{Code: rpcCodeNumber(e.Status), Message: e.Message, Details: e.Details}, false
	}
	switch ft.Kind {
	case BatchItemOK, Delay:
		return f.response(req, candidate(f.text(req), "STOP"), nil), nil, false
	case BatchItemMissing:
		return nil, nil, true
	case BatchItemExpired:
		return fail(apiErrorBody{Message: "The batch expired before this request was processed.", Status: "DEADLINE_EXCEEDED"})
	case BatchItemCancelled:
		return fail(apiErrorBody{Message: "The batch was cancelled before this request was processed.", Status: "CANCELLED"})
	case RateLimit:
		return fail(quotaError(req.Model, ft, "GenerateRequestsPerMinutePerProjectPerModel", "generate_content_requests", "1000"))
	case Quota:
		return fail(quotaError(req.Model, ft, "GenerateRequestsPerDayPerProjectPerModel-FreeTier", "generate_content_free_tier_requests", "250"))
	case Unauthorized:
		return fail(invalidKey())
	case PermissionDenied:
		return fail(apiErrorBody{Message: "Permission denied.", Status: "PERMISSION_DENIED"})
	case RegionUnsupported:
		return fail(apiErrorBody{Message: "User location is not supported for the API use.", Status: "FAILED_PRECONDITION"})
	case ServerError:
		status := cmp.Or(ft.Status, http.StatusInternalServerError)
		return fail(apiErrorBody{Message: "An internal error has occurred.", Status: rpcStatus(status)})
	case HTTPError:
		status := cmp.Or(ft.Status, http.StatusBadRequest)
		return fail(apiErrorBody{Message: http.StatusText(status), Status: cmp.Or(rpcStatus(status), "UNKNOWN")})
	default:
		// Disconnect, TimeoutAfterAnswer and other call faults have no
		// batch item form: the item failed on the server.
		return fail(apiErrorBody{Message: "An internal error has occurred.", Status: "INTERNAL"})
	}
}

// rpcCodeNumber is the google.rpc.Code number of a status name; 2
// (UNKNOWN) for a name it does not know.
func rpcCodeNumber(name string) int {
	for i, n := range rpcCodeNames {
		if n == name {
			return i
		}
	}
	return 2
}

func fakeTerminal(state string) bool {
	switch state {
	case BatchStateSucceeded, BatchStateFailed, BatchStateCancelled, BatchStateExpired:
		return true
	}
	return false
}

// The batch Operation on the wire, fields in the API's order.
type (
	fakeOp struct {
		Name     string         `json:"name"`
		Metadata fakeBatchMeta  `json:"metadata"`
		Done     bool           `json:"done,omitempty"`
		Error    *fakeRPCStatus `json:"error,omitempty"`
		Response *fakeBatchOut  `json:"response,omitempty"`
	}
	fakeBatchMeta struct {
		Type        string          `json:"@type"`
		Model       string          `json:"model"`
		DisplayName string          `json:"displayName"`
		InputConfig fakeInputConfig `json:"inputConfig"`
		Output      *fakeBatchOut   `json:"output,omitempty"`
		CreateTime  string          `json:"createTime"`
		EndTime     string          `json:"endTime,omitempty"`
		UpdateTime  string          `json:"updateTime"`
		BatchStats  fakeBatchStats  `json:"batchStats"`
		State       string          `json:"state"`
		Name        string          `json:"name"`
	}
	fakeInputConfig struct {
		FileName string `json:"fileName,omitempty"`
		Requests *struct {
			Requests []json.RawMessage `json:"requests"`
		} `json:"requests,omitempty"`
	}
	fakeBatchOut struct {
		Type             string `json:"@type,omitempty"`
		ResponsesFile    string `json:"responsesFile,omitempty"`
		InlinedResponses *struct {
			InlinedResponses []json.RawMessage `json:"inlinedResponses"`
		} `json:"inlinedResponses,omitempty"`
	}
	fakeBatchStats struct {
		RequestCount           string `json:"requestCount"`
		SuccessfulRequestCount string `json:"successfulRequestCount,omitempty"`
		FailedRequestCount     string `json:"failedRequestCount,omitempty"`
		PendingRequestCount    string `json:"pendingRequestCount,omitempty"`
	}
	// fakeRPCStatus is a google.rpc.Status.
	fakeRPCStatus struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
		Details []any  `json:"details,omitempty"`
	}
)

// opJSON encodes b as the API answers it, and reports whether the answer
// carries inline results. The caller holds the batch lock.
func (st *fakeBatchState) opJSON(b *fakeBatch) ([]byte, bool) {
	op := fakeOp{
		Name: b.id,
		Metadata: fakeBatchMeta{
			Type:        fakeBatchType,
			Model:       b.model,
			DisplayName: b.displayName,
			CreateTime:  b.created.Format(time.RFC3339Nano),
			UpdateTime:  b.updated.Format(time.RFC3339Nano),
			State:       b.state,
			Name:        b.id,
			BatchStats:  fakeBatchStats{RequestCount: strconv.Itoa(len(b.items))},
		},
	}
	if b.inputFile != "" {
		op.Metadata.InputConfig.FileName = b.inputFile
	} else {
		op.Metadata.InputConfig.Requests = &struct {
			Requests []json.RawMessage `json:"requests"`
		}{b.requests}
	}
	results := false
	if fakeTerminal(b.state) {
		op.Done = true
		op.Metadata.EndTime = b.ended.Format(time.RFC3339Nano)
		op.Metadata.BatchStats.SuccessfulRequestCount = strconv.Itoa(b.succeeded)
		op.Metadata.BatchStats.FailedRequestCount = strconv.Itoa(b.failed)
		op.Metadata.BatchStats.PendingRequestCount = "0"
		op.Error = b.opError
		if b.opError == nil {
			out := fakeBatchOut{ResponsesFile: b.outputFile}
			if b.outputFile == "" {
				out.InlinedResponses = &struct {
					InlinedResponses []json.RawMessage `json:"inlinedResponses"`
				}{b.inline}
				results = true
			}
			op.Metadata.Output = &out
			mirrored := out
			mirrored.Type = fakeBatchOutputType
			op.Response = &mirrored
		}
	} else {
		op.Metadata.BatchStats.PendingRequestCount = strconv.Itoa(len(b.items))
	}
	return marshal(op), results
}
