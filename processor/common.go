package processor

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"time"

	"github.com/stetlabs/stet"
)

// Common is the configuration every provider adapter repeats: who the
// processor is, where its text goes and what the provider keeps. Each
// adapter's Config embeds one, so cmd/stet builds it once from the config
// file whatever the kind.
type Common struct {
	ID string // the processor ID from stet's config
	// BaseURL is the provider's API root; empty means the adapter's
	// DefaultBaseURL (where it has one).
	BaseURL string
	// APIKey is the credential; how it is sent is the adapter's business.
	// Empty means none, for servers that need none (adapters may insist).
	APIKey    string
	Model     string
	Region    string
	Retention string
	// ZeroRetention says the provider keeps no copy of the text.
	ZeroRetention bool
	Subprocessors []string
	// Pending names the boundary declarations the config left pending: the
	// gate never sends such a processor text.
	Pending []string
	// Timeout bounds one call, response body included; 0 means the
	// adapter's DefaultTimeout.
	Timeout time.Duration
	// HTTPClient is optional (tests, drills, stet batch status); nil means
	// http.DefaultTransport. Adapters send through Client's copy of it,
	// which refuses redirects and bounds response bodies whatever it is.
	HTTPClient *http.Client
}

// Check reports the problems every adapter rejects the same way: a missing
// id and a negative timeout. pkg prefixes the error ("openai").
func (c Common) Check(pkg string) error {
	if c.ID == "" {
		return errors.New(pkg + ": config: id is required")
	}
	if c.Timeout < 0 {
		return fmt.Errorf("%s: config %s: timeout must not be negative", pkg, c.ID)
	}
	return nil
}

// CheckModel is Check for an adapter that needs a model: it also rejects
// an empty Model.
func (c Common) CheckModel(pkg string) error {
	if err := c.Check(pkg); err != nil {
		return err
	}
	if c.Model == "" {
		return fmt.Errorf("%s: config %s: model is required", pkg, c.ID)
	}
	return nil
}

// ParseBaseURL returns c.BaseURL, or def when it is empty, and its parsed
// form. It must be an absolute http(s) URL; pkg prefixes the error
// ("openai").
func (c Common) ParseBaseURL(pkg, def string) (string, *url.URL, error) {
	base := c.BaseURL
	if base == "" {
		base = def
	}
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", nil, fmt.Errorf("%s: config %s: base_url must be an absolute http(s) URL", pkg, c.ID)
	}
	return base, u, nil
}

// TimeoutOr returns c.Timeout, or def when it is zero.
func (c Common) TimeoutOr(def time.Duration) time.Duration {
	if c.Timeout == 0 {
		return def
	}
	return c.Timeout
}

// Info returns the part of a processor's stet.ProcessorInfo that Common
// decides, for a processor of the given kind. Every adapter built on Common
// calls a provider over HTTP, so SendsTextOffHost is true. Capabilities are
// left to the adapter; Subprocessors is a copy.
func (c Common) Info(kind string) stet.ProcessorInfo {
	return stet.ProcessorInfo{
		ID:               c.ID,
		Kind:             kind,
		Model:            c.Model,
		Region:           c.Region,
		Retention:        c.Retention,
		ZeroRetention:    c.ZeroRetention,
		Subprocessors:    append([]string{}, c.Subprocessors...),
		SendsTextOffHost: true,
		Pending:          slices.Clone(c.Pending),
	}
}

// CopyInfo returns info with its slices copied, so that a caller of a
// processor's Info cannot change what the processor declares.
func CopyInfo(info stet.ProcessorInfo) stet.ProcessorInfo {
	info.Subprocessors = append([]string{}, info.Subprocessors...)
	info.Capabilities = append([]string{}, info.Capabilities...)
	info.Pending = slices.Clone(info.Pending)
	return info
}
