package api

import (
	"encoding/json"
	"net/http"
)

// Discovery is GET /v1/discovery (docs/design.md §7): where each source's text may
// go, under which policy, for how long — without any document data. It is
// built once from the config (cmd/stet) and filtered by the caller's tenant.
type Discovery struct {
	EncryptionAtRest bool              `json:"encryption_at_rest"`
	Sources          []DiscoverySource `json:"sources"`
}

// DiscoverySource is one source in the discovery document.
type DiscoverySource struct {
	Tenant     string               `json:"-"`
	ID         string               `json:"id"`
	Mode       string               `json:"mode"`
	Identity   string               `json:"identity"`
	Revisions  string               `json:"revisions"`
	Media      []string             `json:"media"` // text, and audio for a source that takes it
	Profile    DiscoveryProfile     `json:"profile"`
	Policy     DiscoveryPolicy      `json:"policy"`
	Processors []DiscoveryProcessor `json:"processors"`
	// Transcribers are those the source's audio may reach (docs/design.md
	// §19), with the same declarations; empty unless the policy says
	// audio: allow.
	Transcribers []DiscoveryProcessor   `json:"transcribers"`
	Destinations []DiscoveryDestination `json:"destinations"`
}

// DiscoveryProfile is a source's profile and its JSON schema.
type DiscoveryProfile struct {
	ID      string          `json:"id"`
	Version int             `json:"version"`
	Schema  json.RawMessage `json:"schema"`
}

// DiscoveryPolicy is a source's policy; Hash is what revisions record.
type DiscoveryPolicy struct {
	ID            string             `json:"id"`
	Hash          string             `json:"hash"`
	Minimize      []string           `json:"minimize"`
	Regions       []string           `json:"regions"`
	Retention     DiscoveryRetention `json:"retention"`
	ReplayHorizon string             `json:"replay_horizon"`
	Audio         string             `json:"audio"` // allow | deny: whether audio may leave for a transcriber
}

// DiscoveryRetention is how long stet keeps each kind of data ("kept":
// no limit).
type DiscoveryRetention struct {
	Text      string `json:"text"`
	Artifacts string `json:"artifacts"`
	Records   string `json:"records"`
	// Audio is how long audio is kept once transcribed ("0s": purged at
	// once).
	Audio string `json:"audio"`
}

// DiscoveryProcessor is a processor a source's text may reach, or a
// transcriber its audio may.
type DiscoveryProcessor struct {
	ID                string   `json:"id"`
	Kind              string   `json:"kind"`
	Role              string   `json:"role"` // primary | fallback
	Model             string   `json:"model"`
	Region            string   `json:"region"`
	Retention         string   `json:"retention"`
	ZeroDataRetention bool     `json:"zero_data_retention"`
	Subprocessors     []string `json:"subprocessors"`
	// Pending names the boundary declarations still unanswered: the
	// processor is never sent text until they are (absent: none).
	Pending []string `json:"pending,omitempty"`
}

// DiscoveryDestination is where a source's records are delivered.
type DiscoveryDestination struct {
	ID     string   `json:"id"`
	Host   string   `json:"host"`
	Events []string `json:"events"`
}

func (s *Server) discovery(w http.ResponseWriter, r *http.Request) {
	tok := tokenOf(r)
	out := Discovery{Sources: []DiscoverySource{}}
	if d := s.cfg.Discovery; d != nil {
		out.EncryptionAtRest = d.EncryptionAtRest
		for _, src := range d.Sources {
			if src.Tenant == tok.Tenant {
				out.Sources = append(out.Sources, src)
			}
		}
	}
	if !s.audit(w, r, "discovery.read", "tenant", tok.Tenant) {
		return
	}
	writeJSON(w, http.StatusOK, out)
}
