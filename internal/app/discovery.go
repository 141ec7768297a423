package app

import (
	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/api"
	"github.com/stetlabs/stet/config"
)

// Discovery builds GET /v1/discovery from the config: each source's
// profile and schema, its policy (with the hash revisions record), and the
// processors its text may reach, with their region, retention and
// subprocessors. It holds no document data. encryption says whether the
// ledger seals text at rest. A processor's model is the one its built
// client declares (procs; the rules processor's is its rules file's hash,
// the model stet inspect shows), else the configured one.
func Discovery(cfg *config.Config, encryption bool, procs map[string]stet.Processor) *api.Discovery {
	d := &api.Discovery{EncryptionAtRest: encryption, Sources: []api.DiscoverySource{}}
	kept := func(v config.Duration) string {
		if v == 0 {
			return "kept"
		}
		return v.String()
	}
	for i := range cfg.Sources {
		s := &cfg.Sources[i]
		prof := cfg.Profile(s.Profile)
		pc := cfg.Policy(s.Policy)
		pol := pc.Domain()
		ds := api.DiscoverySource{
			Tenant: s.Tenant, ID: s.ID, Mode: string(s.Mode), Identity: string(s.Identity), Revisions: string(s.Revisions),
			Media:   append([]string{}, s.Media...),
			Profile: api.DiscoveryProfile{ID: prof.ID, Version: prof.Version, Schema: prof.SchemaJSON},
			Policy: api.DiscoveryPolicy{ID: pol.ID, Hash: pol.Hash(), Minimize: []string{}, Regions: []string{},
				Retention: api.DiscoveryRetention{Text: kept(pc.Retention.Text), Artifacts: kept(pc.Retention.Artifacts), Records: kept(pc.Retention.Records),
					Audio: pc.Retention.Audio.String()},
				ReplayHorizon: pc.ReplayHorizon.String(), Audio: pc.Audio},
			Processors:   []api.DiscoveryProcessor{},
			Transcribers: []api.DiscoveryProcessor{},
			Destinations: []api.DiscoveryDestination{}, // destinations are a later issue
		}
		for _, c := range pol.Minimize {
			ds.Policy.Minimize = append(ds.Policy.Minimize, string(c))
		}
		ds.Policy.Regions = append(ds.Policy.Regions, pol.Regions...)
		for n, id := range pol.Processors {
			p := cfg.Processor(id)
			if p == nil {
				continue
			}
			model := p.Model
			if built, ok := procs[p.ID]; ok && built.Info().Model != "" {
				model = built.Info().Model
			}
			ds.Processors = append(ds.Processors, discoveryProcessor(p, n, model))
		}
		if pol.AudioAllowed {
			for n, id := range pol.Transcribers {
				if t := cfg.Transcriber(id); t != nil {
					ds.Transcribers = append(ds.Transcribers, discoveryProcessor(t, n, t.Model))
				}
			}
		}
		d.Sources = append(d.Sources, ds)
	}
	return d
}

// discoveryProcessor is the entry of processor or transcriber p, the nth
// its policy lists (the first is primary, the rest fallbacks).
func discoveryProcessor(p *config.Processor, n int, model string) api.DiscoveryProcessor {
	role := "fallback"
	if n == 0 {
		role = "primary"
	}
	return api.DiscoveryProcessor{ID: p.ID, Kind: p.Kind, Role: role, Model: model,
		Region: p.Region, Retention: p.Retention, ZeroDataRetention: p.ZeroRetention.Value,
		Subprocessors: append([]string{}, p.Subprocessors.List...), Pending: p.PendingAnswers()}
}
