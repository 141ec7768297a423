package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"math"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor/transcribe"
	"github.com/stetlabs/stet/webhook"
)

// intakeBody is the delivery body of docs/design.md §7.
type intakeBody struct {
	ExternalID *string          `json:"external_id"`
	Revision   json.RawMessage  `json:"revision"`
	Text       *string          `json:"text"`
	Audio      *intakeAudio     `json:"audio"`
	Metadata   *json.RawMessage `json:"metadata"`
}

// intakeAudio is an audio report's clip (docs/design.md §19).
type intakeAudio struct {
	ContentType string `json:"content_type"`
	Data        string `json:"data"` // base64
}

// IntakeResponse is the answer to an accepted or duplicate delivery.
type IntakeResponse struct {
	JobID     string `json:"job_id"`
	ReportID  string `json:"report_id"`
	Revision  int64  `json:"revision"`
	State     string `json:"state"`
	Duplicate bool   `json:"duplicate"`
}

const (
	maxExternalID = 256
	maxWebhookID  = 256
)

func (s *Server) intake(w http.ResponseWriter, r *http.Request) {
	status := s.intakeStatus(w, r)
	s.cfg.Metrics.Intake.WithLabelValues(strconv.Itoa(status)).Inc()
}

// intakeStatus serves one delivery and returns the status it answered.
// Order: source, size, signature over the raw bytes, media type, then
// parsing. Nothing is stored unless every check passes, but a refused
// signature's audit row (auditDeniedIntake).
func (s *Server) intakeStatus(w http.ResponseWriter, r *http.Request) int {
	fail := func(status int, slug, detail string) int {
		s.problem(w, r, status, slug, detail)
		return status
	}
	src := s.sources[r.PathValue("source")]
	if src == nil {
		return fail(http.StatusNotFound, "unknown-source", "no such source")
	}
	limit := s.cfg.BodyLimit
	if src.Audio {
		limit = max(limit, src.AudioBodyLimit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return fail(http.StatusRequestEntityTooLarge, "body-too-large", "the body is larger than "+strconv.FormatInt(limit, 10)+" bytes")
		}
		return fail(http.StatusBadRequest, "unreadable-body", "the body could not be read")
	}
	if len(r.Header.Get(webhook.IDHeader)) > maxWebhookID {
		return fail(http.StatusBadRequest, "invalid-body", "webhook-id must be at most 256 bytes")
	}
	if err := src.Verifier.Verify(r.Header, body); err != nil {
		s.auditDeniedIntake(r, src, err)
		return fail(http.StatusUnauthorized, "invalid-signature", err.Error())
	}
	// The quota counts only signed deliveries, so nobody without the
	// source's secret can spend a tenant's quota.
	if ok, wait := s.quota.take(src.Tenant, s.clock.Now()); !ok {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(wait.Seconds())))))
		return fail(http.StatusTooManyRequests, "rate-limited", "this tenant's intake quota is spent; retry after the Retry-After seconds")
	}
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
			return fail(http.StatusUnprocessableEntity, "unsupported-media", "only application/json bodies are supported; audio comes base64 in the audio field of a source that takes it")
		}
	}
	p, perr := src.ParseBody(body)
	if perr != nil {
		return fail(perr.Status, perr.Slug, perr.Detail)
	}
	if p.Audio == nil && int64(len(body)) > s.cfg.BodyLimit {
		// A text report on a source that takes audio: the text limit.
		return fail(http.StatusRequestEntityTooLarge, "body-too-large", "the body is larger than "+strconv.FormatInt(s.cfg.BodyLimit, 10)+" bytes")
	}
	p.DeliveryKey, p.Now = r.Header.Get("webhook-id"), s.clock.Now()

	res, err := s.cfg.Acceptor.Accept(r.Context(), p)
	if err != nil {
		s.log.Error("intake failed", "source", src.ID, "tenant", src.Tenant, "err", err)
		w.Header().Set("Retry-After", "1")
		return fail(http.StatusServiceUnavailable, "unavailable", "the delivery could not be confirmed as stored; retry it — a retry never creates a duplicate")
	}
	switch res.Outcome {
	case ledger.OutcomeAccepted:
		s.log.Info("delivery accepted", "source", src.ID, "tenant", src.Tenant, "report_id", res.ReportID, "revision", res.Revision, "job_id", res.JobID)
		writeJSON(w, http.StatusAccepted, IntakeResponse{JobID: res.JobID, ReportID: res.ReportID, Revision: res.Revision, State: string(stet.JobAccepted)})
		return http.StatusAccepted
	case ledger.OutcomeDuplicate:
		s.log.Info("duplicate delivery", "source", src.ID, "tenant", src.Tenant, "report_id", res.ReportID, "revision", res.Revision, "job_id", res.JobID)
		writeJSON(w, http.StatusOK, IntakeResponse{JobID: res.JobID, ReportID: res.ReportID, Revision: res.Revision, State: string(res.State), Duplicate: true})
		return http.StatusOK
	case ledger.OutcomeDeliveryConflict:
		return fail(http.StatusConflict, "delivery-conflict", "this webhook-id was already delivered with a different body")
	case ledger.OutcomeGone:
		return fail(http.StatusGone, "gone", "this report was deleted; it is not accepted again until the replay horizon passes")
	case ledger.OutcomeRevisionConflict:
		return fail(http.StatusConflict, "revision-conflict", "this revision was already delivered with different content; send a new revision")
	default:
		s.log.Error("intake: unknown outcome", "outcome", string(res.Outcome))
		return fail(http.StatusInternalServerError, "internal", "internal error")
	}
}

// jsonProblem describes a JSON decoding error without quoting the input.
func jsonProblem(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		// Offset counts the bytes read, the offending one included: it is
		// that byte's position counting from 1.
		return "malformed JSON at byte " + strconv.FormatInt(se.Offset, 10) + " (counting from 1)"
	case errors.As(err, &te):
		return "field " + te.Field + " has the wrong type"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "malformed JSON: the body ends early"
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		// The field name comes from the body, so it is not echoed.
		return "the body has a field this API does not accept (allowed: external_id, revision, text, metadata)"
	default:
		return "malformed JSON"
	}
}

// loneSurrogates reports whether decoding turned invalid escapes (a lone
// surrogate such as \ud800) into U+FFFD: text holds more U+FFFD than its raw
// JSON string in body spells out, literally or as \ufffd. A document that
// really contains U+FFFD is accepted. Only the text's own raw value counts:
// a \ufffd spelled in metadata must not hide a lone surrogate in text.
func loneSurrogates(text string, body []byte) bool {
	n := strings.Count(text, "\uFFFD")
	if n == 0 {
		return false
	}
	// The same field matching as the decode of intakeBody, so the same key
	// (case-insensitive, the last one wins) is read.
	var raw struct {
		Text json.RawMessage `json:"text"`
	}
	if json.Unmarshal(body, &raw) != nil {
		return true
	}
	spelled := bytes.Count(raw.Text, []byte("\uFFFD"))
	for i := 0; i < len(raw.Text); i++ {
		if raw.Text[i] != '\\' {
			continue
		}
		// An escape: \ufffd counts, and "\\ufffd" (an escaped backslash,
		// then letters) does not.
		if i+6 <= len(raw.Text) && raw.Text[i+1] == 'u' && bytes.EqualFold(raw.Text[i+2:i+6], []byte("fffd")) {
			spelled++
		}
		i++
	}
	return n > spelled
}

// BodyError is why a delivery's body was refused: an HTTP status, a stable
// problem slug and a detail that never quotes the body.
type BodyError struct {
	Status int
	Slug   string
	Detail string
}

func (e *BodyError) Error() string { return e.Detail }

// ParseBody checks a delivery body (already verified and read) against the
// source's identity and revision rules and returns what to accept. It is
// the one place those rules live: intake and stet import both use it. The
// caller sets DeliveryKey and Now.
func (src *Source) ParseBody(body []byte) (ledger.AcceptParams, *BodyError) {
	if !utf8.Valid(body) {
		return ledger.AcceptParams{}, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "the body is not valid UTF-8"}
	}
	var p ledger.AcceptParams
	if t := bytes.TrimLeft(body, " \t\r\n"); len(t) > 0 && t[0] != '{' {
		// Not JSON at all, or JSON that is not an object: say so, rather
		// than name a byte inside what was never meant as JSON.
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body",
			Detail: "the body is not a JSON object: it must start with { (byte " + strconv.Itoa(len(body)-len(t)+1) + " is not {)"}
	}
	var in intakeBody
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&in); err != nil {
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: jsonProblem(err)}
	}
	if rest := bytes.TrimSpace(body[dec.InputOffset():]); len(rest) > 0 {
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "the body holds something after its JSON object"}
	}
	p = ledger.AcceptParams{
		TenantID: src.Tenant, SourceID: src.ID, Identity: src.Identity, Revisions: src.Revisions,
		BodySHA256: stet.SHA256Hex(body), Mode: src.Mode,
		PolicyID: src.PolicyID, PolicyHash: src.PolicyHash, ProfileID: src.ProfileID, ProfileVersion: src.ProfileVersion,
	}
	switch {
	case in.Audio != nil && !src.Audio:
		return p, &BodyError{Status: http.StatusUnprocessableEntity, Slug: "unsupported-media", Detail: "this source takes text reports only"}
	case in.Audio != nil && in.Text != nil:
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "give text or audio, not both"}
	case in.Audio != nil:
		a, berr := parseAudio(in.Audio)
		if berr != nil {
			return p, berr
		}
		p.Audio = a
	case in.Text == nil && src.Audio:
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "text or audio is required"}
	case in.Text == nil:
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "text is required"}
	case strings.TrimSpace(*in.Text) == "":
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "text is empty"}
	case loneSurrogates(*in.Text, body):
		return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "text holds an escaped lone surrogate, which is not valid UTF-8"}
	default:
		p.Text = stet.NewText(*in.Text)
	}
	switch src.Identity {
	case stet.IdentityExternalID:
		if in.ExternalID == nil || *in.ExternalID == "" {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "external_id is required for this source"}
		}
		if len(*in.ExternalID) > maxExternalID || strings.ContainsFunc(*in.ExternalID, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "external_id must be at most 256 bytes without control characters"}
		}
		p.ExternalID = *in.ExternalID
	case stet.IdentityContent:
		if in.ExternalID != nil {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "external_id must be absent: this source identifies reports by content"}
		}
	}
	switch src.Revisions {
	case stet.RevisionsExplicit:
		if in.Revision == nil || bytes.Equal(in.Revision, []byte("null")) {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "revision is required for this source"}
		}
		// Only a JSON integer: not "1", not 1.5, not 1e0.
		n, err := strconv.ParseInt(string(in.Revision), 10, 64)
		if err != nil || n < 1 {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "revision must be a positive integer"}
		}
		p.Revision = n
	case stet.RevisionsContent:
		if in.Revision != nil && !bytes.Equal(in.Revision, []byte("null")) {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "revision must be absent: stet numbers this source's revisions"}
		}
	}
	if in.Metadata != nil {
		m := bytes.TrimSpace(*in.Metadata)
		if len(m) > 0 && m[0] != '{' && !bytes.Equal(m, []byte("null")) {
			return p, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "metadata must be an object"}
		}
		if len(m) > 0 && m[0] == '{' {
			p.Metadata = json.RawMessage(m)
		}
	}

	return p, nil
}

// parseAudio checks an audio report's clip: an accepted media type and
// non-empty base64 data.
func parseAudio(in *intakeAudio) (*ledger.Audio, *BodyError) {
	mt, _, err := mime.ParseMediaType(in.ContentType)
	if err != nil || !slices.Contains(transcribe.ContentTypes, mt) {
		return nil, &BodyError{Status: http.StatusUnprocessableEntity, Slug: "unsupported-media",
			Detail: "audio.content_type must be one of " + strings.Join(transcribe.ContentTypes, ", ")}
	}
	data, err := base64.StdEncoding.DecodeString(in.Data)
	if err != nil {
		return nil, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "audio.data is not standard base64"}
	}
	if len(data) == 0 {
		return nil, &BodyError{Status: http.StatusBadRequest, Slug: "invalid-body", Detail: "audio.data is empty"}
	}
	return &ledger.Audio{ContentType: mt, Data: data}, nil
}
