package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stetlabs/stet"
)

// Record events a destination may subscribe to (docs/design.md §13).
const (
	EventCommitted = "record.committed" // a review record was written (extracted or manual)
	EventDecided   = "record.decided"   // a reviewer decided it
	EventDeleted   = "record.deleted"   // the deletion workflow removed it
	EventReopened  = "record.reopened"  // an operator put a decided record back to pending
)

// RecordEvents is the closed list of record events.
var RecordEvents = []string{EventCommitted, EventDecided, EventReopened, EventDeleted}

// DeliveryState is an outbox row's state. The list is closed.
type DeliveryState string

// Delivery states.
const (
	DeliveryPending   DeliveryState = "pending"   // not yet answered 2xx; retried with backoff
	DeliveryDelivered DeliveryState = "delivered" // the receiver answered 2xx
	DeliveryFailed    DeliveryState = "failed"    // max_age passed without a 2xx: invariant 8
	DeliveryDisabled  DeliveryState = "disabled"  // held: the destination answered 410 for this source
	DeliveryCancelled DeliveryState = "cancelled" // never sent: the record was deleted first
)

// AlertSource and AlertDestination address the alert webhook in the
// destinations and outbox tables.
const (
	AlertSource      = "*"
	AlertDestination = "alerts"
)

// DestinationSpec is one configured destination of a source.
type DestinationSpec struct {
	SourceID      string
	DestinationID string
	Events        []string
	MaxAge        time.Duration
}

// SyncDestinations records the configured destinations. A destination keeps
// its disabled flag and backoff across restarts; one no longer configured is
// marked so (its pending rows stay, and fail at their max_age).
func (db *DB) SyncDestinations(ctx context.Context, specs []DestinationSpec, now time.Time) error {
	sources := map[string]bool{}
	for _, s := range specs {
		sources[s.SourceID] = true
	}
	defer db.destSources.Store(&sources)
	return db.InTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `UPDATE destinations SET configured = FALSE, updated_at = $1`, micros(now)); err != nil {
			return fmt.Errorf("sync destinations: %w", err)
		}
		for _, s := range specs {
			_, err := tx.ExecContext(ctx, `INSERT INTO destinations (source_id, destination_id, events, max_age_us, configured, updated_at)
				VALUES ($1, $2, $3, $4, TRUE, $5)
				ON CONFLICT (source_id, destination_id) DO UPDATE SET events = excluded.events,
					max_age_us = excluded.max_age_us, configured = TRUE, updated_at = excluded.updated_at`,
				s.SourceID, s.DestinationID, strings.Join(s.Events, ","), s.MaxAge.Microseconds(), micros(now))
			if err != nil {
				return fmt.Errorf("sync destination %s/%s: %w", s.SourceID, s.DestinationID, err)
			}
		}
		return nil
	})
}

type destRow struct {
	id       string
	events   []string
	maxAge   time.Duration
	disabled bool
}

func configuredDestinations(ctx context.Context, q Querier, sourceID string) ([]destRow, error) {
	rows, err := q.QueryContext(ctx, `SELECT destination_id, events, max_age_us, disabled_at IS NOT NULL
		FROM destinations WHERE source_id = $1 AND configured ORDER BY destination_id`, sourceID)
	if err != nil {
		return nil, fmt.Errorf("read destinations: %w", err)
	}
	defer rows.Close()
	var out []destRow
	for rows.Next() {
		var d destRow
		var events string
		var maxAge int64
		if err := rows.Scan(&d.id, &events, &maxAge, &d.disabled); err != nil {
			return nil, fmt.Errorf("read destinations: %w", err)
		}
		d.events = strings.Split(events, ",")
		d.maxAge = time.Duration(maxAge) * time.Microsecond
		out = append(out, d)
	}
	return out, rows.Err()
}

// recordEvent is one event of one review record, to write to the outbox.
type recordEvent struct {
	event                                         string
	recordID, jobID, reportID, tenantID, sourceID string
	// reportKey names the report when reportID is "" (then read with the
	// sequence, only when a destination takes the event).
	reportKey int64
	now       time.Time
	// only limits the event to these destinations (record.deleted); nil
	// means every destination subscribed to the event.
	only []string
	// nth counts the event's occurrences on the record (its second
	// decision after a reopen, say); above 1 it is part of the webhook-id.
	nth int
}

// webhookID is the event's webhook-id: WebhookID, and its occurrence
// from the second on.
func (e recordEvent) webhookID() string {
	if e.nth > 1 {
		return fmt.Sprintf("%s_%d", WebhookID(e.recordID, e.event), e.nth)
	}
	return WebhookID(e.recordID, e.event)
}

// WebhookID is the Standard Webhooks message id of a record event: stable
// across retries and destinations, so receivers dedupe on it.
func WebhookID(recordID, event string) string { return "evt_" + recordID + "_" + event }

// enqueueRecordEvent writes one outbox row per destination of the record's
// source that takes the event, in tx (the transaction that commits,
// decides or deletes the record). It draws the report's next sequence
// number. Writing it twice is harmless: the webhook id is unique per
// destination.
func enqueueRecordEvent(ctx context.Context, tx Querier, e recordEvent) ([]string, error) {
	dests, err := configuredDestinations(ctx, tx, e.sourceID)
	if err != nil {
		return nil, err
	}
	return enqueueRecordEventTo(ctx, tx, e, dests)
}

// enqueueRecordEventTo is enqueueRecordEvent with the source's configured
// destinations already read (it does not change the slice).
func enqueueRecordEventTo(ctx context.Context, tx Querier, e recordEvent, dests []destRow) ([]string, error) {
	if len(dests) == 0 {
		return nil, nil
	}
	dests = slices.DeleteFunc(slices.Clone(dests), func(d destRow) bool {
		if e.only != nil {
			return !slices.Contains(e.only, d.id)
		}
		return !slices.Contains(d.events, e.event)
	})
	if len(dests) == 0 {
		return nil, nil
	}
	var seq int64
	var err error
	if e.reportID != "" {
		err = tx.QueryRowContext(ctx, `UPDATE reports SET outbox_sequence = outbox_sequence + 1 WHERE public_id = $1 RETURNING outbox_sequence`,
			pub(e.reportID)).Scan(&seq)
	} else {
		err = tx.QueryRowContext(ctx, `UPDATE reports SET outbox_sequence = outbox_sequence + 1 WHERE id = $1 RETURNING outbox_sequence, public_id`,
			e.reportKey).Scan(&seq, reportPub(&e.reportID))
	}
	if err != nil {
		return nil, fmt.Errorf("draw outbox sequence: %w", err)
	}
	ts := micros(e.now)
	var out []string
	for _, d := range dests {
		state := DeliveryPending
		if d.disabled {
			state = DeliveryDisabled
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO outbox (id, source_id, destination_id, webhook_id, event, tenant_id, record_id, job_id,
				report_id, sequence, state, next_attempt_at, expires_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $12, $12)
			ON CONFLICT (source_id, destination_id, webhook_id) DO NOTHING`,
			stet.NewID("out", e.now), e.sourceID, d.id, e.webhookID(), e.event, e.tenantID, e.recordID, e.jobID,
			e.reportID, seq, string(state), ts, micros(e.now.Add(d.maxAge)))
		if err != nil {
			return nil, fmt.Errorf("write outbox: %w", err)
		}
		out = append(out, d.id)
	}
	return out, nil
}

// enqueueDecided writes the record.decided outbox rows of the nth
// decision of a record (event is EventDecided), or those of its nth
// reopen (EventReopened).
func enqueueDecided(ctx context.Context, tx Querier, recordID, event string, nth int, now time.Time) error {
	e := recordEvent{event: event, recordID: recordID, now: now, nth: nth}
	err := tx.QueryRowContext(ctx, `SELECT j.public_id, rp.public_id, r.tenant_id, r.source_id
		FROM review_records r JOIN jobs j ON j.id = r.job_id JOIN reports rp ON rp.id = r.report_id WHERE r.public_id = $1`, pub(recordID)).
		Scan(jobPub(&e.jobID), reportPub(&e.reportID), &e.tenantID, &e.sourceID)
	if err != nil {
		return fmt.Errorf("read decided record: %w", err)
	}
	_, err = enqueueRecordEvent(ctx, tx, e)
	return err
}

// EnqueueRecordDeleted is the deletion workflow's seam (docs/design.md §13): call it
// in the transaction that deletes review record recordID, before the record
// row goes. Every destination that received the record — a row delivered,
// or attempted at least once, so possibly received — gets a record.deleted
// event, whatever its events list says; rows of the record never attempted
// are cancelled (nothing was sent, nothing is to delete). It returns the
// destinations notified, one deletion task each; their outbox rows
// (webhook id WebhookID(recordID, EventDeleted)) say when they are done.
// The record.deleted body is built from the outbox row's IDs when the
// record is gone by delivery time.
func EnqueueRecordDeleted(ctx context.Context, tx Querier, recordID string, now time.Time) ([]string, error) {
	rows, err := tx.QueryContext(ctx, `SELECT DISTINCT destination_id, job_id, report_id, tenant_id, source_id FROM outbox
		WHERE record_id = $1 AND event <> $2 AND (state = 'delivered' OR attempts > 0)`, recordID, EventDeleted)
	if err != nil {
		return nil, fmt.Errorf("read record deliveries: %w", err)
	}
	e := recordEvent{event: EventDeleted, recordID: recordID, now: now, only: []string{}}
	for rows.Next() {
		var d string
		if err := rows.Scan(&d, &e.jobID, &e.reportID, &e.tenantID, &e.sourceID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read record deliveries: %w", err)
		}
		e.only = append(e.only, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox SET state = 'cancelled', lease_until = NULL, updated_at = $1
		WHERE record_id = $2 AND event <> $3 AND state IN ('pending', 'disabled')`, micros(now), recordID, EventDeleted); err != nil {
		return nil, fmt.Errorf("cancel record deliveries: %w", err)
	}
	if len(e.only) == 0 {
		return nil, nil
	}
	return enqueueRecordEvent(ctx, tx, e)
}

// Delivery is one outbox row: one event for one destination.
type Delivery struct {
	ID            string          `json:"id"`
	SourceID      string          `json:"source"`
	DestinationID string          `json:"destination"`
	WebhookID     string          `json:"webhook_id"`
	Event         string          `json:"event"`
	TenantID      string          `json:"tenant_id"`
	RecordID      string          `json:"record_id,omitempty"`
	JobID         string          `json:"job_id,omitempty"`
	ReportID      string          `json:"report_id,omitempty"`
	Sequence      int64           `json:"sequence"`
	Payload       json.RawMessage `json:"-"` // alerts only: an IDs-only body
	State         DeliveryState   `json:"state"`
	Attempts      int             `json:"attempts"`
	LastStatus    int             `json:"last_status,omitempty"`
	LastError     string          `json:"last_error,omitempty"` // a class: connect, timeout, redirect, status
	NextAttemptAt time.Time       `json:"next_attempt_at"`
	ExpiresAt     time.Time       `json:"expires_at"`
	CreatedAt     time.Time       `json:"created_at"`
	DeliveredAt   time.Time       `json:"delivered_at,omitzero"`
}

const deliveryColumns = `id, source_id, destination_id, webhook_id, event, tenant_id, record_id, job_id, report_id, sequence,
	payload, state, attempts, last_status, last_error, next_attempt_at, expires_at, created_at, delivered_at`

func scanDelivery(row interface{ Scan(...any) error }) (Delivery, error) {
	var d Delivery
	var rec, job, rep, payload, lastErr sql.NullString
	var status, delivered sql.NullInt64
	var next, expires, created int64
	var state string
	err := row.Scan(&d.ID, &d.SourceID, &d.DestinationID, &d.WebhookID, &d.Event, &d.TenantID, &rec, &job, &rep, &d.Sequence,
		&payload, &state, &d.Attempts, &status, &lastErr, &next, &expires, &created, &delivered)
	if err != nil {
		return d, err
	}
	d.RecordID, d.JobID, d.ReportID, d.LastError = rec.String, job.String, rep.String, lastErr.String
	if payload.Valid {
		d.Payload = json.RawMessage(payload.String)
	}
	d.State, d.LastStatus = DeliveryState(state), int(status.Int64)
	d.NextAttemptAt, d.ExpiresAt, d.CreatedAt = time.UnixMicro(next).UTC(), time.UnixMicro(expires).UTC(), time.UnixMicro(created).UTC()
	d.DeliveredAt = fromMicros(delivered)
	return d, nil
}

func queryDeliveries(ctx context.Context, q Querier, where string, args ...any) ([]Delivery, error) {
	rows, err := q.QueryContext(ctx, `SELECT `+deliveryColumns+` FROM outbox WHERE `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("read deliveries: %w", err)
	}
	defer rows.Close()
	var out []Delivery
	for rows.Next() {
		d, err := scanDelivery(rows)
		if err != nil {
			return nil, fmt.Errorf("read deliveries: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// JobDeliveries lists the outbox rows of a job's review record, oldest
// first: what the job view and stet inspect show.
func JobDeliveries(ctx context.Context, q Querier, jobID string) ([]Delivery, error) {
	return queryDeliveries(ctx, q, `job_id = $1 ORDER BY created_at, id`, jobID)
}

// Deliveries lists outbox rows of one (source, destination), oldest first,
// at most limit (default 1000).
func (db *DB) Deliveries(ctx context.Context, sourceID, destinationID string, limit int) ([]Delivery, error) {
	if limit <= 0 {
		limit = 1000
	}
	return queryDeliveries(ctx, db.w, `source_id = $1 AND destination_id = $2 ORDER BY created_at, id LIMIT $3`,
		sourceID, destinationID, limit)
}

// DestinationState is a destination's delivery state, for the sweep and
// stet destinations list.
type DestinationState struct {
	SourceID       string                `json:"source"`
	DestinationID  string                `json:"destination"`
	Configured     bool                  `json:"configured"`
	DisabledAt     time.Time             `json:"disabled_at,omitzero"`
	DisabledStatus int                   `json:"disabled_status,omitempty"`
	RetryAt        time.Time             `json:"retry_at,omitzero"`
	Failures       int                   `json:"failures"` // consecutive failed POSTs
	Counts         map[DeliveryState]int `json:"counts"`
}

// Destinations lists every destination the ledger knows with its outbox
// counts by state.
func (db *DB) Destinations(ctx context.Context) ([]DestinationState, error) {
	rows, err := db.w.QueryContext(ctx, `SELECT source_id, destination_id, configured, disabled_at, disabled_status, retry_at, failures
		FROM destinations ORDER BY source_id, destination_id`)
	if err != nil {
		return nil, fmt.Errorf("list destinations: %w", err)
	}
	var out []DestinationState
	for rows.Next() {
		var d DestinationState
		var disabled, status, retry sql.NullInt64
		if err := rows.Scan(&d.SourceID, &d.DestinationID, &d.Configured, &disabled, &status, &retry, &d.Failures); err != nil {
			rows.Close()
			return nil, fmt.Errorf("list destinations: %w", err)
		}
		d.DisabledAt, d.DisabledStatus, d.RetryAt = fromMicros(disabled), int(status.Int64), fromMicros(retry)
		d.Counts = map[DeliveryState]int{}
		out = append(out, d)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for i := range out {
		d := &out[i]
		crow, err := db.w.QueryContext(ctx, `SELECT state, COUNT(*) FROM outbox WHERE source_id = $1 AND destination_id = $2 GROUP BY state`,
			d.SourceID, d.DestinationID)
		if err != nil {
			return nil, fmt.Errorf("count deliveries: %w", err)
		}
		for crow.Next() {
			var s string
			var n int
			if err := crow.Scan(&s, &n); err != nil {
				crow.Close()
				return nil, err
			}
			d.Counts[DeliveryState(s)] = n
		}
		crow.Close()
	}
	return out, nil
}

// DueDestinations lists the configured, enabled destinations out of backoff
// that hold a pending row due at now.
func (db *DB) DueDestinations(ctx context.Context, now time.Time) ([]DestinationState, error) {
	ts := micros(now)
	rows, err := db.w.QueryContext(ctx, `SELECT d.source_id, d.destination_id, d.failures FROM destinations d
		WHERE d.configured AND d.disabled_at IS NULL AND (d.retry_at IS NULL OR d.retry_at <= $1)
		  AND EXISTS (SELECT 1 FROM outbox o WHERE o.source_id = d.source_id AND o.destination_id = d.destination_id
		      AND o.state = 'pending' AND o.next_attempt_at <= $1 AND (o.lease_until IS NULL OR o.lease_until <= $1))
		ORDER BY d.source_id, d.destination_id`, ts)
	if err != nil {
		return nil, fmt.Errorf("due destinations: %w", err)
	}
	defer rows.Close()
	var out []DestinationState
	for rows.Next() {
		d := DestinationState{Configured: true}
		if err := rows.Scan(&d.SourceID, &d.DestinationID, &d.Failures); err != nil {
			return nil, fmt.Errorf("due destinations: %w", err)
		}
		out = append(out, d)
	}
	return out, rows.Err()
}

// ClaimDeliveriesParams claims due deliveries of one destination.
type ClaimDeliveriesParams struct {
	SourceID, DestinationID string
	Now                     time.Time
	Lease                   time.Duration // a claimed row is not claimed again before this passes
	Limit                   int
}

// ClaimDeliveries first fails the destination's pending rows past their
// max_age, then leases up to Limit due rows, oldest first. A row whose
// lease another process holds is skipped.
func (db *DB) ClaimDeliveries(ctx context.Context, p ClaimDeliveriesParams) ([]Delivery, error) {
	ts := micros(p.Now)
	var out []Delivery
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		out = out[:0]
		if _, err := tx.ExecContext(ctx, `UPDATE outbox SET state = 'failed', lease_until = NULL, updated_at = $1
			WHERE source_id = $2 AND destination_id = $3 AND state = 'pending' AND expires_at <= $1`,
			ts, p.SourceID, p.DestinationID); err != nil {
			return fmt.Errorf("expire deliveries: %w", err)
		}
		due, err := queryDeliveries(ctx, tx, `source_id = $1 AND destination_id = $2 AND state = 'pending' AND next_attempt_at <= $3
			AND (lease_until IS NULL OR lease_until <= $3) ORDER BY created_at, id LIMIT $4`,
			p.SourceID, p.DestinationID, ts, p.Limit)
		if err != nil {
			return err
		}
		for _, d := range due {
			res, err := tx.ExecContext(ctx, `UPDATE outbox SET lease_until = $1 WHERE id = $2 AND state = 'pending'
				AND (lease_until IS NULL OR lease_until <= $3)`, micros(p.Now.Add(p.Lease)), d.ID, ts)
			if err != nil {
				return fmt.Errorf("lease delivery: %w", err)
			}
			if n, _ := res.RowsAffected(); n == 1 {
				out = append(out, d)
			}
		}
		return nil
	})
	return out, err
}

// RecordEventBody is the "record" object of a §13 delivery body.
type RecordEventBody struct {
	ID             string          `json:"id"`
	JobID          string          `json:"job_id"`
	ReportID       string          `json:"report_id"`
	Source         string          `json:"source"`
	ExternalID     *string         `json:"external_id"`
	Revision       int64           `json:"revision"`
	Kind           string          `json:"kind"`
	Authoritative  bool            `json:"authoritative"`
	Classification json.RawMessage `json:"classification"`
	FailureClass   *string         `json:"failure_class"`
	Decision       *string         `json:"decision"`
}

// RecordForDelivery reads the record a delivery is about, as it is now.
// A record the deletion workflow removed comes back with IDs only.
func (db *DB) RecordForDelivery(ctx context.Context, d Delivery) (RecordEventBody, error) {
	b := RecordEventBody{ID: d.RecordID, JobID: d.JobID, ReportID: d.ReportID, Source: d.SourceID, Classification: json.RawMessage("null")}
	var ext, class, failure, decision sql.NullString
	var sealed, reportSealed int
	err := db.w.QueryRowContext(ctx, `SELECT r.revision, r.kind, r.authoritative, r.classification, r.failure_class, r.decision, p.external_id, r.sealed,
			p.sealed
		FROM review_records r JOIN reports p ON p.id = r.report_id WHERE r.public_id = $1`, pub(d.RecordID)).
		Scan(&b.Revision, &b.Kind, &b.Authoritative, &class, &failure, &decision, &ext, &sealed, &reportSealed)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return b, nil
	case err != nil:
		return b, fmt.Errorf("read record for delivery: %w", err)
	}
	o := db.opener(db.w)
	ext, err = o.open(ctx, d.ReportID, colExternalID, d.ReportID, ext, reportSealed)
	switch {
	case errors.Is(err, ErrKeyDestroyed):
		ext = sql.NullString{}
	case err != nil:
		return b, fmt.Errorf("read record for delivery: %w", err)
	}
	if ext.Valid {
		b.ExternalID = &ext.String
	}
	class, err = o.open(ctx, d.ReportID, colClassification, d.RecordID, class, sealed)
	switch {
	case errors.Is(err, ErrKeyDestroyed):
		// Crypto-shredded: the record's content is gone, its IDs stay.
		class = sql.NullString{}
	case err != nil:
		return b, fmt.Errorf("read record for delivery: %w", err)
	}
	if class.Valid && class.String != "" {
		b.Classification = json.RawMessage(class.String)
	}
	if failure.Valid {
		b.FailureClass = &failure.String
	}
	if decision.Valid {
		b.Decision = &decision.String
	}
	return b, nil
}

// DeliveryOutcome is what one POST came to.
type DeliveryOutcome string

// Delivery outcomes.
const (
	OutcomeDelivered DeliveryOutcome = "delivered" // 2xx
	OutcomeRetry     DeliveryOutcome = "retry"     // anything else but 410: back off
	OutcomeDisabled  DeliveryOutcome = "gone"      // 410: disable the destination for the source
)

// FinishDeliveryParams records one POST of a leased row.
type FinishDeliveryParams struct {
	Delivery Delivery
	Outcome  DeliveryOutcome
	Status   int    // HTTP status; 0 when none came
	Error    string // a class when no status came: connect, timeout, redirect
	RetryAt  time.Time
	// RowOnly (retry outcome) backs off this row alone: the receiver
	// answered, so the destination itself is up.
	RowOnly bool
	Now     time.Time
}

// FinishDelivery records the outcome of one POST and the destination's
// backoff, in one transaction. A retry due after the row's max_age fails
// the row at once.
func (db *DB) FinishDelivery(ctx context.Context, p FinishDeliveryParams) error {
	d, ts := p.Delivery, micros(p.Now)
	status := sql.NullInt64{Int64: int64(p.Status), Valid: p.Status != 0}
	return db.InTx(ctx, func(tx *sql.Tx) error {
		var err error
		switch p.Outcome {
		case OutcomeDelivered:
			_, err = tx.ExecContext(ctx, `UPDATE outbox SET state = 'delivered', attempts = attempts + 1, last_status = $1, last_error = NULL,
				lease_until = NULL, delivered_at = $2, updated_at = $2 WHERE id = $3`, status, ts, d.ID)
			if err == nil {
				_, err = tx.ExecContext(ctx, `UPDATE destinations SET failures = 0, retry_at = NULL, updated_at = $1
					WHERE source_id = $2 AND destination_id = $3`, ts, d.SourceID, d.DestinationID)
			}
		case OutcomeRetry:
			state := DeliveryPending
			if !p.RetryAt.Before(d.ExpiresAt) {
				state = DeliveryFailed
			}
			_, err = tx.ExecContext(ctx, `UPDATE outbox SET state = $1, attempts = attempts + 1, last_status = $2, last_error = $3,
				next_attempt_at = $4, lease_until = NULL, updated_at = $5 WHERE id = $6 AND state = 'pending'`,
				string(state), status, nullString(p.Error), micros(p.RetryAt), ts, d.ID)
			if err == nil && !p.RowOnly {
				_, err = tx.ExecContext(ctx, `UPDATE destinations SET failures = failures + 1, retry_at = $1, updated_at = $2
					WHERE source_id = $3 AND destination_id = $4`, micros(p.RetryAt), ts, d.SourceID, d.DestinationID)
			}
		case OutcomeDisabled:
			_, err = tx.ExecContext(ctx, `UPDATE outbox SET state = 'disabled', attempts = attempts + 1, last_status = $1, last_error = NULL,
				lease_until = NULL, updated_at = $2 WHERE id = $3`, status, ts, d.ID)
			if err == nil {
				err = disableDestination(ctx, tx, d.SourceID, d.DestinationID, p.Status, p.Now)
			}
		default:
			return fmt.Errorf("finish delivery: unknown outcome %q", p.Outcome)
		}
		if err != nil {
			return fmt.Errorf("finish delivery: %w", err)
		}
		return nil
	})
}

func disableDestination(ctx context.Context, tx Querier, sourceID, destID string, status int, now time.Time) error {
	ts := micros(now)
	if _, err := tx.ExecContext(ctx, `UPDATE destinations SET disabled_at = COALESCE(disabled_at, $1), disabled_status = $2, updated_at = $1
		WHERE source_id = $3 AND destination_id = $4`, ts, status, sourceID, destID); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, `UPDATE outbox SET state = 'disabled', lease_until = NULL, updated_at = $1
		WHERE source_id = $2 AND destination_id = $3 AND state = 'pending'`, ts, sourceID, destID); err != nil {
		return err
	}
	return Audit(ctx, tx, AuditEntry{Tenant: "*", Actor: "stet", Action: "destination.disable", ObjectType: "destination",
		ObjectID: sourceID + "/" + destID, Detail: fmt.Sprintf("status %d", status), Now: now})
}

// EnableDestination clears a destination's disabled flag for a source and
// returns the rows it held to pending, each with a fresh max_age. It
// returns how many rows it re-queued, and stet.ErrNotFound (as ENotFound)
// for a destination the ledger does not know.
func (db *DB) EnableDestination(ctx context.Context, sourceID, destID, actor string, now time.Time) (int, error) {
	return db.requeue(ctx, sourceID, destID, actor, "destination.enable", DeliveryDisabled, now)
}

// RetryFailedDeliveries returns a destination's failed rows (past max_age:
// invariant 8) to pending with a fresh max_age, for an operator who fixed
// the receiver. It returns how many rows it re-queued.
func (db *DB) RetryFailedDeliveries(ctx context.Context, sourceID, destID, actor string, now time.Time) (int, error) {
	return db.requeue(ctx, sourceID, destID, actor, "destination.retry", DeliveryFailed, now)
}

func (db *DB) requeue(ctx context.Context, sourceID, destID, actor, action string, from DeliveryState, now time.Time) (int, error) {
	var n int64
	ts := micros(now)
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		var maxAge int64
		err := tx.QueryRowContext(ctx, `SELECT max_age_us FROM destinations WHERE source_id = $1 AND destination_id = $2`,
			sourceID, destID).Scan(&maxAge)
		if errors.Is(err, sql.ErrNoRows) {
			return notFound("destination")
		}
		if err != nil {
			return fmt.Errorf("read destination: %w", err)
		}
		if from == DeliveryDisabled {
			if _, err := tx.ExecContext(ctx, `UPDATE destinations SET disabled_at = NULL, disabled_status = NULL, retry_at = NULL,
				failures = 0, updated_at = $1 WHERE source_id = $2 AND destination_id = $3`, ts, sourceID, destID); err != nil {
				return fmt.Errorf("enable destination: %w", err)
			}
		}
		res, err := tx.ExecContext(ctx, `UPDATE outbox SET state = 'pending', next_attempt_at = $1, expires_at = $2, lease_until = NULL,
			updated_at = $1 WHERE source_id = $3 AND destination_id = $4 AND state = $5`,
			ts, ts+maxAge, sourceID, destID, string(from))
		if err != nil {
			return fmt.Errorf("requeue deliveries: %w", err)
		}
		n, _ = res.RowsAffected()
		return Audit(ctx, tx, AuditEntry{Tenant: "*", Actor: actor, Action: action, ObjectType: "destination",
			ObjectID: sourceID + "/" + destID, Detail: fmt.Sprintf("%d deliveries", n), Now: now})
	})
	return int(n), err
}

// ReleaseDeliveryLeases ends every outbox lease. Only a process alone on
// its database (embedded SQLite, after a crash) may call it.
func ReleaseDeliveryLeases(ctx context.Context, q Querier) error {
	if _, err := q.ExecContext(ctx, `UPDATE outbox SET lease_until = NULL WHERE lease_until IS NOT NULL`); err != nil {
		return fmt.Errorf("release delivery leases: %w", err)
	}
	return nil
}

// ReleaseDeliveries ends the leases of rows a sweep claimed but did not
// send (it stopped at a failure), so the next sweep sends them in order.
func (db *DB) ReleaseDeliveries(ctx context.Context, rows []Delivery) error {
	for _, d := range rows {
		if _, err := db.w.ExecContext(ctx, `UPDATE outbox SET lease_until = NULL WHERE id = $1 AND state = 'pending'`, d.ID); err != nil {
			return fmt.Errorf("release delivery: %w", err)
		}
	}
	return nil
}
