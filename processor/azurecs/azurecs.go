// Package azurecs is stet's processor for Azure AI Content Safety text
// moderation (POST {endpoint}/contentsafety/text:analyze), over plain
// net/http. It is a specialist processor with no prompt: it sends the
// minimized text alone, receives a severity for each harm category (Hate,
// SelfHarm, Sexual, Violence), and turns the severities into a record for
// the profile's schema through a Mapping (a YAML file whose format
// docs/azure-content-safety.md describes).
//
// The adapter makes at most one HTTP request per Extract call, never
// follows redirects (the subscription key and the text go only to the
// configured endpoint), and classifies every failure once, here, into a
// *stet.ProcessorError. It must never put the service's error message or
// the document text into an error string, a log or the output: the record
// holds values from the mapping file, and its rationale names categories
// and numbers only.
//
// Its wire-faithful fake server, used by tests, drills and benchmarks, is
// package azurecsfake.
package azurecs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

// Kind is the processor kind this package implements.
const Kind = "azure-content-safety"

// DefaultAPIVersion is the newest generally available api-version of
// text:analyze.
const DefaultAPIVersion = "2024-09-01"

// DefaultTimeout bounds one call when Config.Timeout is zero.
const DefaultTimeout = 30 * time.Second

// MaxTextLength is the most Unicode code points text:analyze takes in one
// request. Longer input is unsupported: see Extract.
const MaxTextLength = 10000

// maxResponseBytes bounds the response body kept in memory. An analysis is
// a few hundred bytes.
const maxResponseBytes = 1 << 20

// Codes of the *stet.ProcessorError values Extract returns besides the
// service's own error codes.
const (
	// CodeEmptyInput: the minimized text is empty or only whitespace. No
	// call is made. Class unsupported.
	CodeEmptyInput = "empty_input"
	// CodeTextTooLong: the minimized text is over MaxTextLength code points.
	// No call is made. Class unsupported.
	CodeTextTooLong = "text_too_long"
	// CodeSchemaMismatch: the mapping sets a property the call's schema does
	// not declare, or a value it does not allow. No call is made. Class
	// unsupported.
	CodeSchemaMismatch = "schema_mismatch"
	// CodeInvalidSchema: the call carries no valid JSON schema. Class
	// unsupported.
	CodeInvalidSchema = "invalid_schema"
	// CodeMappingRepair: the pipeline asked for a repair of this
	// processor's output. The mapping is deterministic, so asking again
	// would give the same record: no call is made. Class unsupported.
	CodeMappingRepair = "mapping_output_invalid"
	// CodeMalformedResponse: a 2xx answer that is not an analysis (not
	// JSON, a requested category missing, a severity out of range). Class
	// transient.
	CodeMalformedResponse = "malformed_response"
	// CodeRedirect: the endpoint answered with a redirect, which is never
	// followed. Class unsupported: the endpoint is misconfigured.
	CodeRedirect = "redirect"
)

var errCallTimeout = errors.New("azure content safety call timed out")

// Config configures a Client. BaseURL is the resource's endpoint,
// https://<resource>.cognitiveservices.azure.com (a trailing /contentsafety
// is accepted); APIKey is sent as Ocp-Apim-Subscription-Key. Model labels
// the processor in Info and attempts, the service having no model
// parameter; default "text-analyze-<api-version>+mapping-<the first 12 hex
// digits of the mapping file's SHA-256>". The Client uses a copy of
// HTTPClient that refuses redirects.
type Config struct {
	processor.Common
	// APIVersion is the api-version query parameter; default
	// DefaultAPIVersion.
	APIVersion string
	// Mapping turns severities into the profile's record. If nil,
	// MappingPath is loaded.
	Mapping     *Mapping
	MappingPath string
	// Schema is the profile's JSON Schema. When set, New checks the mapping
	// against it; Extract repeats the check (once per distinct schema) for
	// the schema each call carries.
	Schema json.RawMessage
}

// Client is a stet.Processor backed by text:analyze. It is safe for
// concurrent use.
type Client struct {
	info     stet.ProcessorInfo
	endpoint string // the full text:analyze URL
	key      string
	timeout  time.Duration
	hc       *http.Client
	mapping  *Mapping
	now      func() time.Time // for Retry-After HTTP-dates
	// fitted caches the schema check per schema.
	fitted processor.SchemaFits
}

var _ stet.Processor = (*Client)(nil)

// New returns a Client for cfg. It reads the mapping file if given by path,
// and makes no network call.
func New(cfg Config) (*Client, error) {
	if err := cfg.Check("azurecs"); err != nil {
		return nil, err
	}
	_, u, err := cfg.ParseBaseURL("azurecs", "")
	if err != nil || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("azurecs: config %s: base_url must be the resource's http(s) endpoint", cfg.ID)
	}
	version := cfg.APIVersion
	if version == "" {
		version = DefaultAPIVersion
	}
	if processor.SafeCode(version) == "" {
		return nil, fmt.Errorf("azurecs: config %s: api version %q is not of the form 2024-09-01", cfg.ID, version)
	}
	m := cfg.Mapping
	if m == nil {
		if cfg.MappingPath == "" {
			return nil, fmt.Errorf("azurecs: config %s: a mapping is required", cfg.ID)
		}
		if m, err = LoadMapping(cfg.MappingPath); err != nil {
			return nil, fmt.Errorf("azurecs: config %s: %w", cfg.ID, err)
		}
	}
	timeout := cfg.TimeoutOr(DefaultTimeout)
	hc := cfg.Client(processor.MaxResponseBytes)

	path := strings.TrimSuffix(strings.TrimRight(u.Path, "/"), "/contentsafety")
	u.Path = path + "/contentsafety/text:analyze"
	u.RawPath = ""
	u.RawQuery = url.Values{"api-version": {version}}.Encode()

	model := cfg.Model
	if model == "" {
		// The record depends on the mapping as much as on the service, so
		// the label names both.
		model = "text-analyze-" + version + "+mapping-" + m.Hash()[:12]
	}
	info := cfg.Info(Kind)
	info.Model = model
	info.Capabilities = []string{"sync", "moderation"}
	c := &Client{
		info:     info,
		endpoint: u.String(),
		key:      cfg.APIKey,
		timeout:  timeout,
		hc:       hc,
		mapping:  m,
		now:      time.Now,
	}
	if len(cfg.Schema) > 0 {
		if err := c.fits(cfg.Schema); err != nil {
			return nil, fmt.Errorf("azurecs: config %s: %w", cfg.ID, err)
		}
	}
	return c, nil
}

// Info declares the processor's identity and data boundary.
func (c *Client) Info() stet.ProcessorInfo { return processor.CopyInfo(c.info) }

// Mapping returns the client's mapping.
func (c *Client) Mapping() *Mapping { return c.mapping }

// Extract analyzes p.Input (the minimized text; the prompt is not used) and
// maps the severities onto the profile's schema. Every error is a
// *stet.ProcessorError. No call is made for empty input, for input over
// MaxTextLength code points (unsupported: a chunked analysis would be
// several calls for one attempt, and a person reviews long documents), for
// a schema the mapping does not fit, or for a repair request.
func (c *Client) Extract(ctx context.Context, p stet.ExtractParams) (*stet.Extraction, error) {
	if len(p.Schema) > 0 {
		if !json.Valid(p.Schema) {
			return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeInvalidSchema,
				Err: errors.New("extract params carry an invalid JSON schema")}
		}
		if err := c.fits(p.Schema); err != nil {
			return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeSchemaMismatch, Err: err}
		}
	}
	if len(p.Repair) > 0 {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeMappingRepair,
			Err: errors.New("the mapping's output failed validation; a deterministic mapping cannot repair it")}
	}
	text := p.Input.Reveal()
	if strings.TrimSpace(text) == "" {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeEmptyInput}
	}
	if n := utf8.RuneCountInString(text); n > MaxTextLength {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Code: CodeTextTooLong,
			Err: fmt.Errorf("text is %d code points, over the limit of %d", n, MaxTextLength)}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(analyzeRequest{Text: text, Categories: Categories, OutputType: c.mapping.OutputType()}); err != nil {
		return nil, &stet.ProcessorError{Class: stet.FailureUnsupported, Err: fmt.Errorf("encode request: %w", err)}
	}
	body := bytes.TrimRight(buf.Bytes(), "\n")

	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	start := time.Now()
	res, err := c.do(callCtx, body)
	latency := time.Since(start)
	if err != nil {
		return nil, c.classifyTransport(ctx, callCtx, err, res)
	}
	if res.status < 200 || res.status > 299 {
		return nil, c.classifyStatus(res)
	}
	sev, err := parseAnalysis(res.body, c.mapping.levels())
	if err != nil {
		return nil, &stet.ProcessorError{Class: stet.FailureTransient, StatusCode: res.status, Code: CodeMalformedResponse,
			RequestID: res.requestID, Err: err}
	}
	return &stet.Extraction{
		Output:     c.mapping.Apply(sev),
		Raw:        res.body,
		Model:      c.info.Model,
		RequestID:  res.requestID,
		StatusCode: res.status,
		Latency:    latency,
	}, nil
}

// fits checks the mapping against schema once per distinct schema.
func (c *Client) fits(schema json.RawMessage) error {
	return c.fitted.Check(schema, c.mapping.CheckSchema)
}

// analyzeRequest is the text:analyze body. blocklistNames and
// haltOnBlocklistHit are not sent: stet uses no blocklists.
type analyzeRequest struct {
	Text       string   `json:"text"`
	Categories []string `json:"categories"`
	OutputType string   `json:"outputType"`
}

// response is what the wire said for one call.
type response struct {
	status    int
	requestID string
	header    http.Header
	body      []byte
}

// do sends one request and reads the whole answer. On an error after the
// headers arrived, res still carries the status and headers.
func (c *Client) do(ctx context.Context, body []byte) (*response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.endpoint, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if c.key != "" {
		req.Header.Set("Ocp-Apim-Subscription-Key", c.key)
	}
	hr, err := processor.Do(c.hc, req)
	if err != nil {
		return nil, err
	}
	defer hr.Body.Close()
	res := &response{status: hr.StatusCode, header: hr.Header, requestID: requestID(hr.Header)}
	raw, err := processor.ReadBody(hr.Body, maxResponseBytes)
	if err != nil {
		return res, err
	}
	res.body = raw
	return res, nil
}

// requestID reads apim-request-id, the gateway's ID for the call, falling
// back to x-ms-request-id. Only identifier-like values are kept.
func requestID(h http.Header) string {
	for _, k := range []string{"apim-request-id", "x-ms-request-id"} {
		if v := processor.SafeCode(strings.TrimSpace(h.Get(k))); v != "" {
			return v
		}
	}
	return ""
}

// parseAnalysis reads the severities of a 200 answer. Every requested
// category must be there once, with a severity the output type can report.
func parseAnalysis(body []byte, levels []int) (Severities, error) {
	var wire struct {
		CategoriesAnalysis *[]struct {
			Category string `json:"category"`
			Severity *int   `json:"severity"`
		} `json:"categoriesAnalysis"`
	}
	if err := json.Unmarshal(body, &wire); err != nil {
		return nil, errors.New("response is not a JSON analysis")
	}
	if wire.CategoriesAnalysis == nil {
		return nil, errors.New("response has no categoriesAnalysis")
	}
	sev := Severities{}
	for _, a := range *wire.CategoriesAnalysis {
		known := false
		for _, c := range Categories {
			known = known || c == a.Category
		}
		if !known {
			continue // a category stet did not ask for
		}
		if _, dup := sev[a.Category]; dup {
			return nil, fmt.Errorf("category %s reported twice", a.Category)
		}
		if a.Severity == nil {
			return nil, fmt.Errorf("category %s has no severity", a.Category)
		}
		ok := false
		for _, l := range levels {
			ok = ok || l == *a.Severity
		}
		if !ok {
			return nil, fmt.Errorf("category %s severity %d is not a level of the output type", a.Category, *a.Severity)
		}
		sev[a.Category] = *a.Severity
	}
	for _, c := range Categories {
		if _, ok := sev[c]; !ok {
			return nil, fmt.Errorf("category %s missing from the analysis", c)
		}
	}
	return sev, nil
}
