// Package batchlookup is stet batch status: ONE bounded status lookup of
// an existing provider batch, and its printout. It never submits a batch,
// never cancels one and never sends document text: it sends one GET with
// the processor's key, retrying only a 429, and at most Attempts in all.
package batchlookup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/internal/app"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/processor"
)

// Bounds of a lookup.
const (
	Attempts = 3
	Timeout  = 20 * time.Second
	MaxBody  = 1 << 20
)

// HTTPClient is the client a lookup sends through: the processor clients'
// own (redirects refused, bodies bounded) with a Timeout and bodies read up
// to MaxBody. The adapter keeps its policy on top of it.
func HTTPClient() *http.Client {
	return processor.NewHTTPClient(Timeout, MaxBody)
}

// Client builds the batch client of the configured processor processorID,
// with its key read through getenv (an operator config loads no secrets)
// and sending through HTTPClient. Every error is the operator's: a
// processor the config does not have, or one without a batch API.
func Client(cfg *config.Config, processorID string, getenv func(string) string) (stet.BatchProcessor, error) {
	pc := cfg.Processor(processorID)
	if pc == nil {
		return nil, fmt.Errorf("no processor %q in the config", processorID)
	}
	withKey := *pc
	if withKey.APIKeyEnv != "" {
		withKey.APIKey = getenv(withKey.APIKeyEnv)
	}
	proc, err := app.NewProcessor(&withKey, cfg, HTTPClient())
	if err != nil {
		return nil, err
	}
	bp, ok := proc.(stet.BatchProcessor)
	if !ok {
		return nil, fmt.Errorf("processor %s (kind %s) has no batch API", pc.ID, pc.Kind)
	}
	return bp, nil
}

// ErrNoProviderBatch is FromLedger's answer for a batch that never reached
// its provider (intent): there is nothing to look up.
var ErrNoProviderBatch = errors.New("no provider batch to look up")

// FromLedger finds stet's batch id (or a provider batch ID the ledger
// holds) and returns its provider batch ID and processor. A batch the
// ledger does not know is stet.ENotFound.
func FromLedger(ctx context.Context, db *ledger.DB, id string) (providerID, processorID string, err error) {
	b, err := ledger.GetBatch(ctx, db.Reader(), id)
	if err != nil {
		return "", "", err
	}
	if b.ProviderBatchID == "" {
		return "", "", fmt.Errorf("batch %s is %s and has %w", b.ID, b.State, ErrNoProviderBatch)
	}
	return b.ProviderBatchID, b.ProcessorID, nil
}

// Lookup performs one status lookup, retrying a 429 at most Attempts
// attempts in all and waiting the longer of Retry-After and an exponential
// delay (1 s, 2 s); each retry is announced on progress.
func Lookup(ctx context.Context, bp stet.BatchProcessor, providerID string, progress io.Writer) (*stet.BatchStatus, error) {
	var err error
	for attempt := 0; attempt < Attempts; attempt++ {
		var st *stet.BatchStatus
		st, err = bp.BatchStatus(ctx, providerID)
		if err == nil {
			if st.ProviderID == "" {
				st.ProviderID = providerID
			}
			return st, nil
		}
		if stet.ClassOf(err) != stet.FailureRateLimited || attempt == Attempts-1 {
			break
		}
		delay := time.Second << attempt
		if ra := stet.RetryAfterOf(err); ra > delay {
			delay = ra
		}
		fmt.Fprintf(progress, "rate limited; attempt %d of %d in %s\n", attempt+2, Attempts, delay.Round(time.Millisecond))
		select {
		case <-time.After(delay):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var pe *stet.ProcessorError
	if errors.As(err, &pe) && pe.StatusCode != 0 {
		return nil, fmt.Errorf("status lookup failed: HTTP %d (%s)", pe.StatusCode, pe.Class)
	}
	return nil, fmt.Errorf("status lookup failed: %w", err)
}

// WriteText prints the status the processor processorID answered: the
// provider's batch ID first (the ID stet batch reconcile --adopt takes);
// with raw, the provider's answer as it came, indented as stet's other
// --json output is.
func WriteText(w io.Writer, processorID string, st *stet.BatchStatus, raw bool) {
	if raw {
		var b bytes.Buffer
		if err := json.Indent(&b, bytes.TrimSpace(st.Raw), "", "  "); err != nil {
			b.Reset()
			b.Write(st.Raw) // not JSON: as it came
		}
		if b.Len() > 0 && b.Bytes()[b.Len()-1] != '\n' {
			b.WriteByte('\n')
		}
		w.Write(b.Bytes())
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "provider batch\t%s\n", st.ProviderID)
	fmt.Fprintf(tw, "processor\t%s\n", processorID)
	provider := st.ProviderState
	if provider == "" {
		provider = "-"
	}
	fmt.Fprintf(tw, "state\t%s (provider: %s)\n", st.State, provider)
	if st.Total > 0 {
		fmt.Fprintf(tw, "items\t%d: %d succeeded, %d failed\n", st.Total, st.Succeeded, st.Failed)
	}
	if !st.ResultsExpireAt.IsZero() {
		fmt.Fprintf(tw, "results expire\t%s\n", st.ResultsExpireAt.UTC().Format(time.RFC3339))
	}
	if st.RequestID != "" {
		fmt.Fprintf(tw, "request id\t%s\n", st.RequestID)
	}
	tw.Flush()
}
