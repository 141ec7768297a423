package eval

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/admission"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/ledger"
	"github.com/stetlabs/stet/pipeline"
	"github.com/stetlabs/stet/seal"
)

// Params are the inputs of Run.
type Params struct {
	Config  *config.Config
	Profile string // profile ID
	// Source picks the source whose policy decides what is permitted when
	// several sources use the profile under different policies; optional.
	Source     string
	Labels     string // the labels file, for the report and the fingerprint
	Items      []Item
	BadLines   []LineError
	Processors []string // as asked, in order
	// New builds a permitted processor from its config; nil result: this
	// build has no such kind. It is never called for a refused processor.
	New func(*config.Processor) (stet.Processor, error)
	// Out is the folder of the scratch ledger and the report.
	Out         string
	Concurrency int // extract stages at once; 0: the config's workers.concurrency
	// Progress receives a progress bar (Terminal) or a line every few
	// seconds; nil: none.
	Progress io.Writer
	Terminal bool
	Logger   *slog.Logger
	// Keyring, when set (encryption: in the config), seals the labelled
	// texts and outputs in the scratch ledger as stet serve would.
	Keyring *seal.Keyring
}

// Refusal is a processor the eval did not run, and why. No call was made.
type Refusal struct {
	Processor string `json:"processor"`
	Reason    string `json:"reason"`
}

// ErrInterrupted is returned when the context ended before every document
// was extracted; running Run again with the same Out continues.
var ErrInterrupted = errors.New("eval interrupted: run it again with the same --out to continue where it stopped")

// Plan decides which of the asked processors the profile's policy permits,
// with the same boundary rule the pipeline's gate applies; it calls
// nothing.
func Plan(cfg *config.Config, profileID, sourceID string, asked []string) (*stet.Policy, []string, []Refusal, error) {
	if cfg.Profile(profileID) == nil {
		return nil, nil, nil, fmt.Errorf("profile %q is not configured", profileID)
	}
	var policies []string
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		if s.Profile != profileID || (sourceID != "" && s.ID != sourceID) {
			continue
		}
		if !slices.Contains(policies, s.Policy) {
			policies = append(policies, s.Policy)
		}
	}
	switch {
	case len(policies) == 0 && sourceID != "":
		return nil, nil, nil, fmt.Errorf("source %q is not configured with profile %q", sourceID, profileID)
	case len(policies) == 0:
		return nil, nil, nil, fmt.Errorf("no source uses profile %q, so no policy says which processors may see its documents", profileID)
	case len(policies) > 1:
		return nil, nil, nil, fmt.Errorf("sources using profile %q have different policies (%v): choose one with --source", profileID, policies)
	}
	pol := cfg.Policy(policies[0]).Domain()
	var permitted []string
	var refused []Refusal
	for _, id := range asked {
		pc := cfg.Processor(id)
		if pc == nil {
			refused = append(refused, Refusal{id, "not configured under processors"})
			continue
		}
		if err := boundary.Check(pol, stet.ProcessorInfo{ID: pc.ID, Region: pc.Region}); err != nil {
			reason := fmt.Sprintf("policy %q does not permit it", pol.ID)
			var pe *stet.ProcessorError
			if errors.As(err, &pe) && pe.Code == boundary.CodeRegionNotPermitted {
				reason = fmt.Sprintf("policy %q does not permit its region %q", pol.ID, pc.Region)
			}
			refused = append(refused, Refusal{id, reason})
			continue
		}
		if !slices.Contains(permitted, id) {
			permitted = append(permitted, id)
		}
	}
	return pol, permitted, refused, nil
}

// run is one processor's documents in the scratch ledger.
type run struct {
	id     string
	policy *stet.Policy // the production policy with this processor alone
	jobs   []string     // by item
}

// Tenant is the scratch ledger's only tenant.
const Tenant = "eval"

// Run extracts every item with every permitted processor on the scratch
// ledger in p.Out and scores the results. An interrupted Run returns
// ErrInterrupted; the next Run with the same inputs continues from the
// ledger and gives the same report.
func Run(ctx context.Context, p Params) (*Report, error) {
	if p.Logger == nil {
		p.Logger = slog.New(slog.DiscardHandler)
	}
	pol, permitted, refused, err := Plan(p.Config, p.Profile, p.Source, p.Processors)
	if err != nil {
		return nil, err
	}
	cp := p.Config.Profile(p.Profile)
	profile, err := pipeline.NewProfile(*cp.Domain())
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p.Out, 0o700); err != nil {
		return nil, err
	}
	// A profile with parts runs as in production: the parts that name
	// their processors keep them in every run, and the asked processor
	// takes the parts that go to the policy's processors.
	var partProcs []string
	for _, part := range profile.Parts {
		for _, id := range part.Processors {
			if !slices.Contains(partProcs, id) {
				partProcs = append(partProcs, id)
			}
		}
	}
	manifested := slices.Clone(permitted)
	for _, id := range partProcs {
		if !slices.Contains(manifested, id) {
			manifested = append(manifested, id)
		}
	}
	if err := checkManifest(p, pol, manifested); err != nil {
		return nil, err
	}

	procs := map[string]stet.Processor{}
	limits := map[string]admission.Limits{}
	var runs []*run
	var policies []*stet.Policy
	for _, id := range permitted {
		pc := *p.Config.Processor(id)
		proc, err := p.New(&pc)
		if err != nil {
			return nil, fmt.Errorf("processor %s: %w", id, err)
		}
		if proc == nil {
			refused = append(refused, Refusal{id, fmt.Sprintf("kind %s is not available in this build", pc.Kind)})
			continue
		}
		procs[id] = proc
		limits[id] = admission.Limits{RPM: pc.Limits.RPM, TPM: pc.Limits.TPM, Concurrency: pc.Limits.Concurrency}
		// The production policy, this processor alone: the same
		// minimization, regions and retention, and no fallback, so every
		// figure is this processor's.
		sp := *pol
		sp.ID = pol.ID + "@" + id
		sp.Processors = []string{id}
		for _, pid := range partProcs {
			if pid != id {
				sp.Processors = append(sp.Processors, pid)
			}
		}
		policies = append(policies, &sp)
		runs = append(runs, &run{id: id, policy: &sp, jobs: make([]string, len(p.Items))})
	}
	for _, id := range partProcs {
		if procs[id] != nil {
			continue
		}
		pc := p.Config.Processor(id)
		if pc == nil {
			return nil, fmt.Errorf("part processor %s is not configured", id)
		}
		proc, err := p.New(pc)
		if err != nil {
			return nil, fmt.Errorf("processor %s: %w", id, err)
		}
		if proc == nil {
			return nil, fmt.Errorf("processor %s: kind %s is not available in this build", id, pc.Kind)
		}
		procs[id] = proc
		limits[id] = admission.Limits{RPM: pc.Limits.RPM, TPM: pc.Limits.TPM, Concurrency: pc.Limits.Concurrency}
	}

	db, err := ledger.Open(ctx, "sqlite://"+filepath.ToSlash(filepath.Join(p.Out, "ledger.db")))
	if err != nil {
		return nil, fmt.Errorf("open the eval's scratch ledger: %w", err)
	}
	defer db.Close()
	if _, err := db.Migrate(ctx); err != nil {
		return nil, fmt.Errorf("migrate the eval's scratch ledger: %w", err)
	}
	if err := pipeline.Migrate(ctx, db); err != nil {
		return nil, err
	}
	if p.Keyring != nil {
		db.UseKeyring(p.Keyring)
	}
	if err := db.CheckKeys(ctx, time.Now()); err != nil {
		return nil, fmt.Errorf("the eval's scratch ledger: %w", err)
	}
	w := p.Config.Workers
	pl, err := pipeline.New(pipeline.Config{
		DB: db, Processors: procs, Limits: limits, Profiles: []*pipeline.Profile{profile}, Policies: policies,
		Logger: p.Logger, Concurrency: cmpInt(p.Concurrency, w.Concurrency), JobTimeout: w.JobTimeout.Std(),
		RescueAfter: w.RescueAfter.Std(), MaxAttempts: w.MaxAttempts,
		PollInterval: 50 * time.Millisecond, Work: true, SingleProcess: true,
	})
	if err != nil {
		return nil, err
	}
	if err := pl.Start(ctx); err != nil {
		return nil, err
	}
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = pl.Stop(sctx)
	}
	defer stop()

	if err := accept(ctx, pl, profile, runs, p.Items); err != nil {
		return nil, err
	}
	if err := wait(ctx, db, len(runs)*len(p.Items), p); err != nil {
		return nil, err
	}
	stop()

	outcomes := map[string][]Outcome{}
	for _, r := range runs {
		if outcomes[r.id], err = collect(ctx, db, r.jobs); err != nil {
			return nil, err
		}
	}
	return Score(ScoreParams{
		Config: p.Config, Profile: cp, Policy: pol, Labels: p.Labels, Items: p.Items, BadLines: p.BadLines,
		Asked: p.Processors, Refused: refused, Outcomes: outcomes,
	})
}

func cmpInt(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}

// accept delivers every item to every run's source through the pipeline's
// intake: a second Run resolves each to its existing job.
func accept(ctx context.Context, pl *pipeline.Pipeline, profile *pipeline.Profile, runs []*run, items []Item) error {
	type task struct{ r, i int }
	tasks := make(chan task)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range tasks {
				r, it := runs[t.r], items[t.i]
				text := stet.NewText(it.Text)
				res, err := pl.Accept(ctx, ledger.AcceptParams{
					TenantID: Tenant, SourceID: "eval." + r.id, Identity: stet.IdentityExternalID, Revisions: stet.RevisionsExplicit,
					ExternalID: it.ExternalID, Revision: 1, Text: text, DeliveryKey: "eval-" + text.SHA256(), BodySHA256: text.SHA256(),
					PolicyID: r.policy.ID, PolicyHash: r.policy.Hash(), ProfileID: profile.ID, ProfileVersion: profile.Version,
					Mode: stet.ModeSync, Now: time.Now().UTC(),
				})
				switch {
				case err == nil && res.Outcome == ledger.OutcomeAccepted, err == nil && res.Outcome == ledger.OutcomeDuplicate:
					r.jobs[t.i] = res.JobID
					continue
				case err == nil:
					err = fmt.Errorf("labels line %d: the scratch ledger holds this external_id with other text (%s); use a new --out", it.Line, res.Outcome)
				}
				select {
				case errs <- err:
				default:
				}
			}
		}()
	}
	var err error
feed:
	for r := range runs {
		for i := range items {
			select {
			case tasks <- task{r, i}:
			case err = <-errs:
				break feed
			case <-ctx.Done():
				break feed
			}
		}
	}
	close(tasks)
	wg.Wait()
	if err == nil {
		select {
		case err = <-errs:
		default:
		}
	}
	if ctx.Err() != nil {
		return ErrInterrupted
	}
	return err
}

// wait polls the scratch ledger until every job has its record (or is
// blocked), drawing progress.
func wait(ctx context.Context, db *ledger.DB, total int, p Params) error {
	bar := newProgress(p.Progress, p.Terminal, total)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		counts, err := db.RevisionJobCounts(ctx)
		if err != nil && ctx.Err() == nil {
			return err
		}
		done := counts[stet.JobCommitted] + counts[stet.JobManual] + counts[stet.JobBlocked] + counts[stet.JobCancelled]
		bar.update(done)
		if done >= total {
			bar.finish()
			return nil
		}
		pauses, err := db.Pauses(ctx)
		if err == nil && len(pauses) > 0 {
			bar.finish()
			return fmt.Errorf("dispatch of %s paused itself in the eval's scratch ledger (%s): fix the processor's quota or key, then run again with the same --out", pauses[0].Scope, pauses[0].Reason)
		}
		select {
		case <-ctx.Done():
			bar.finish()
			return ErrInterrupted
		case <-tick.C:
		}
	}
}

// checkManifest refuses an Out that holds an eval of other inputs: its
// ledger's jobs would not be this eval's.
func checkManifest(p Params, pol *stet.Policy, permitted []string) error {
	h := sha256.New()
	cp := p.Config.Profile(p.Profile)
	fmt.Fprintf(h, "profile %s@%d\x00%x\x00%x\x00policy %s\x00", cp.ID, cp.Version, sha256.Sum256(cp.SchemaJSON), sha256.Sum256([]byte(cp.PromptText)), pol.Hash())
	for _, it := range p.Items {
		fmt.Fprintf(h, "item %d %s %x\x00", len(it.ExternalID), it.ExternalID, sha256.Sum256([]byte(it.Text)))
	}
	for _, id := range permitted {
		pc := p.Config.Processor(id)
		fmt.Fprintf(h, "processor %s %s %s %s %s %s\x00", pc.ID, pc.Kind, pc.Model, pc.BaseURL, pc.APIVersion, pc.Region)
		for _, f := range []string{pc.Rules, pc.Mapping} {
			if f != "" {
				b, _ := os.ReadFile(f)
				fmt.Fprintf(h, "file %x\x00", sha256.Sum256(b))
			}
		}
	}
	sum := hex.EncodeToString(h.Sum(nil))
	path := filepath.Join(p.Out, "manifest.json")
	type manifest struct {
		Inputs string `json:"inputs_sha256"`
	}
	if b, err := os.ReadFile(path); err == nil {
		var m manifest
		if json.Unmarshal(b, &m) == nil && m.Inputs == sum {
			return nil
		}
		return fmt.Errorf("%s holds an eval of other inputs (labels, profile, policy, processors or a rules file changed): choose another --out, or remove it to start again", p.Out)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	b, _ := json.Marshal(manifest{sum})
	return os.WriteFile(path, b, 0o600)
}
