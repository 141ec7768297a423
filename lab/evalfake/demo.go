package evalfake

import (
	"fmt"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/boundary"
	"github.com/stetlabs/stet/config"
	"github.com/stetlabs/stet/eval"
)

// StartDemo starts the scripted fakes of a --demo-fakes file for stet
// eval, each shown the labelled documents minimized as the policy
// minimizes them, and records in urls each processor's fake base URL.
// Every fake must stand in for an openai processor of cfg.
func StartDemo(path string, cfg *config.Config, profileID string, pol *stet.Policy, items []eval.Item, urls map[string]string) (stop func(), err error) {
	f, err := Load(path)
	if err != nil {
		return nil, err
	}
	mz, err := boundary.NewMinimizer(pol.Minimize, pol.Names)
	if err != nil {
		return nil, err
	}
	docs := make([]Doc, len(items))
	for i, it := range items {
		t, _ := mz.Minimize(stet.NewText(it.Text))
		docs[i] = Doc{Text: t.Reveal(), Expected: it.Expected}
	}
	var started []*Fake
	stop = func() {
		for _, s := range started {
			s.Close()
		}
	}
	for _, b := range f.Fakes {
		pc := cfg.Processor(b.Processor)
		if pc == nil || pc.Kind != config.KindOpenAI {
			stop()
			return nil, fmt.Errorf("demo fakes %s: %q is not an openai processor of the config", path, b.Processor)
		}
		fk, err := Start(b, cfg.Profile(profileID).SchemaJSON, docs)
		if err != nil {
			stop()
			return nil, err
		}
		started = append(started, fk)
		urls[b.Processor] = fk.URL()
	}
	return stop, nil
}
