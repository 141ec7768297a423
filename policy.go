package stet

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strings"
	"time"
)

// IdentifierClass is a class of identifier that minimization replaces with a
// typed placeholder before text leaves stet.
type IdentifierClass string

// Identifier classes.
const (
	IdentEmail   IdentifierClass = "email"
	IdentPhone   IdentifierClass = "phone"
	IdentSSN     IdentifierClass = "ssn"
	IdentMRN     IdentifierClass = "mrn"
	IdentAccount IdentifierClass = "account"
	IdentURL     IdentifierClass = "url"
	IdentIP      IdentifierClass = "ip"
	IdentDate    IdentifierClass = "date"
	IdentName    IdentifierClass = "name"
)

// IdentifierClasses lists every identifier class.
var IdentifierClasses = []IdentifierClass{IdentEmail, IdentPhone, IdentSSN, IdentMRN, IdentAccount, IdentURL, IdentIP, IdentDate, IdentName}

// Policy is an approved data-handling policy. Its ID and content hash are
// recorded on every revision at acceptance.
type Policy struct {
	ID string `json:"id"`
	// Processors are permitted processor IDs in order: the first is primary,
	// the rest approved fallbacks inside the same boundary.
	Processors        []string          `json:"processors"`
	Minimize          []IdentifierClass `json:"minimize"`
	Names             []string          `json:"names,omitempty"` // dictionary for the name class
	TextRetention     time.Duration     `json:"text_retention"`
	ArtifactRetention time.Duration     `json:"artifact_retention"`
	// RecordsRetention, when set, purges decided review records'
	// classification and note after it; zero keeps them. Omitted from the
	// hash when zero, so policies without it keep their recorded hash.
	RecordsRetention time.Duration `json:"records_retention,omitempty"`
	ReplayHorizon    time.Duration `json:"replay_horizon"`
	Regions          []string      `json:"regions,omitempty"`
	// AllowedSubprocessors, when set, lists who besides a processor's
	// provider may see text: a processor declaring any other is refused
	// (and so is an output a provider reports another vendor served).
	// nil leaves subprocessors unrestricted, and out of the hash.
	AllowedSubprocessors *[]string `json:"allowed_subprocessors,omitempty"`
	// Transcribers are the IDs of the transcribers that may hear audio
	// reports under the policy (docs/design.md §19), the first primary.
	// AudioAllowed says audio, which cannot be minimized, may leave at all;
	// AudioRetention keeps it after its transcript is saved (zero: purged
	// at once). All three are omitted from the hash when unset, so a
	// text-only policy keeps its recorded hash.
	Transcribers   []string      `json:"transcribers,omitempty"`
	AudioAllowed   bool          `json:"audio_allowed,omitempty"`
	AudioRetention time.Duration `json:"audio_retention,omitempty"`
}

// AllowsSubprocessor reports whether name may see text under the policy.
func (p *Policy) AllowsSubprocessor(name string) bool {
	return p.AllowedSubprocessors == nil || slices.ContainsFunc(*p.AllowedSubprocessors, func(a string) bool { return strings.EqualFold(a, name) })
}

// Permits reports whether the policy allows processorID.
func (p *Policy) Permits(processorID string) bool { return slices.Contains(p.Processors, processorID) }

// Hash returns the SHA-256 of the policy's canonical JSON: a policy edit
// changes it, so a revision records exactly which content it ran under.
func (p *Policy) Hash() string {
	b, _ := json.Marshal(p)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
