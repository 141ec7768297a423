package ledger

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/stetlabs/stet"
)

// Alert types of the alert webhook body (docs/design.md §6).
const (
	AlertViolated = "invariant.violated"
	AlertResolved = "invariant.resolved"
	AlertPaused   = "processor.paused"
	// AlertBudget: a processor's day's budget is spent and its dispatch
	// paused until the next UTC day (docs/design.md §18).
	AlertBudget    = "processor.budget_exhausted"
	alertKindCheck = "invariant" // alerts the invariant check opens and resolves
)

// Alert is one open or resolved alert. IDs carries IDs only: never text,
// never an external ID.
type Alert struct {
	ID        string            `json:"id"`
	Key       string            `json:"key"`
	Type      string            `json:"type"` // invariant.violated or processor.paused
	Invariant int               `json:"invariant"`
	Name      string            `json:"name"`
	IDs       map[string]string `json:"ids"`
	FirstSeen time.Time         `json:"first_seen"`
}

// AlertBody is the alert webhook's body (docs/design.md §6).
type AlertBody struct {
	Type      string            `json:"type"`
	Invariant int               `json:"invariant"`
	Name      string            `json:"name"`
	IDs       map[string]string `json:"ids"`
	FirstSeen string            `json:"first_seen"`
}

// ViolationKey identifies a violation across checks.
func ViolationKey(v Violation) string {
	return v.Name + "|" + v.ReportID + "|" + v.JobID + "|" + v.BatchID + "|" + v.Scope + "|" + v.DeletionID + "|" + v.Copy
}

// ViolationIDs are the IDs an alert about v carries.
func ViolationIDs(v Violation) map[string]string {
	ids := map[string]string{}
	set := func(k, val string) {
		if val != "" {
			ids[k] = val
		}
	}
	set("tenant", v.TenantID)
	set("source", v.SourceID)
	set("report_id", v.ReportID)
	if v.Revision > 0 {
		ids["revision"] = strconv.FormatInt(v.Revision, 10)
	}
	set("job_id", v.JobID)
	set("stage", v.Stage)
	set("extraction_version", v.ExtractionVersion)
	set("batch_id", v.BatchID)
	set("processor", v.ProcessorID)
	set("scope", v.Scope)
	set("deletion_id", v.DeletionID)
	set("copy", v.Copy)
	return ids
}

// openAlert opens an alert unless one with its key is open, and writes its
// webhook outbox row (when the alert webhook is configured) in tx. It
// reports whether the alert is new.
func openAlert(ctx context.Context, tx Querier, a Alert, now time.Time) (bool, error) {
	ids, err := json.Marshal(a.IDs)
	if err != nil {
		return false, err
	}
	res, err := tx.ExecContext(ctx, `INSERT INTO alerts (id, alert_key, type, invariant, name, ids, first_seen)
		VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (alert_key) WHERE resolved_at IS NULL DO NOTHING`,
		a.ID, a.Key, a.Type, a.Invariant, a.Name, string(ids), micros(a.FirstSeen))
	if err != nil {
		return false, fmt.Errorf("open alert: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return false, nil
	}
	suffix := "violated"
	switch a.Type {
	case AlertPaused:
		suffix = "paused"
	case AlertBudget:
		suffix = "budget"
	}
	return true, enqueueAlert(ctx, tx, a, a.Type, suffix, now)
}

// enqueueAlert writes an alert's webhook outbox row when the alert webhook
// is configured. Its webhook id is stable per alert and state.
func enqueueAlert(ctx context.Context, tx Querier, a Alert, typ, suffix string, now time.Time) error {
	dests, err := configuredDestinations(ctx, tx, AlertSource)
	if err != nil || len(dests) == 0 {
		return err
	}
	body, err := json.Marshal(AlertBody{Type: typ, Invariant: a.Invariant, Name: a.Name, IDs: a.IDs,
		FirstSeen: a.FirstSeen.UTC().Format(time.RFC3339)})
	if err != nil {
		return err
	}
	tenant := a.IDs["tenant"]
	if tenant == "" {
		tenant = "*"
	}
	ts := micros(now)
	for _, d := range dests {
		_, err := tx.ExecContext(ctx, `INSERT INTO outbox (id, source_id, destination_id, webhook_id, event, tenant_id, job_id, report_id,
				sequence, payload, state, next_attempt_at, expires_at, created_at, updated_at)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, 0, $9, 'pending', $10, $11, $10, $10)
			ON CONFLICT (source_id, destination_id, webhook_id) DO NOTHING`,
			stet.NewID("out", now), AlertSource, d.id, "alert_"+a.ID+"_"+suffix, typ, tenant,
			nullString(a.IDs["job_id"]), nullString(a.IDs["report_id"]), string(body), ts, micros(now.Add(d.maxAge)))
		if err != nil {
			return fmt.Errorf("write alert outbox: %w", err)
		}
	}
	return nil
}

// SyncAlerts records one invariant check's violations as alerts, in one
// transaction: a violation with no open alert opens one (and writes its
// invariant.violated webhook row); an open invariant alert whose violation
// is gone is resolved (invariant.resolved). An invariant whose check hit
// limit rows resolves nothing: what is beyond the limit is unknown. Open
// processor.paused alerts whose pause is gone are closed without a webhook.
// It returns the alerts opened and resolved.
func (db *DB) SyncAlerts(ctx context.Context, vs []Violation, limit int, now time.Time) (opened, resolved []Alert, err error) {
	if limit <= 0 {
		limit = 100
	}
	if same, err := db.alertsUnchanged(ctx, vs); err != nil || same {
		return nil, nil, err // most checks change nothing: no write transaction
	}
	err = db.InTx(ctx, func(tx *sql.Tx) error {
		opened, resolved = nil, nil
		current := map[string]bool{}
		perInv := map[int]int{}
		for _, v := range vs {
			key := ViolationKey(v)
			if current[key] {
				continue
			}
			current[key] = true
			perInv[v.Invariant]++
			a := Alert{ID: stet.NewID("alr", now), Key: key, Type: AlertViolated, Invariant: v.Invariant, Name: v.Name,
				IDs: ViolationIDs(v), FirstSeen: now}
			isNew, err := openAlert(ctx, tx, a, now)
			if err != nil {
				return err
			}
			if isNew {
				opened = append(opened, a)
			}
		}
		open, err := openAlerts(ctx, tx)
		if err != nil {
			return err
		}
		for _, a := range open {
			switch a.Type {
			case AlertViolated:
				if current[a.Key] || perInv[a.Invariant] >= limit {
					continue
				}
				if err := resolveAlert(ctx, tx, a.ID, now); err != nil {
					return err
				}
				if err := enqueueAlert(ctx, tx, a, AlertResolved, "resolved", now); err != nil {
					return err
				}
				resolved = append(resolved, a)
			case AlertPaused, AlertBudget:
				var n int
				if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM dispatch_pauses WHERE scope = $1`, a.IDs["scope"]).Scan(&n); err != nil {
					return fmt.Errorf("read pause: %w", err)
				}
				if n == 0 {
					if err := resolveAlert(ctx, tx, a.ID, now); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
	return opened, resolved, err
}

func resolveAlert(ctx context.Context, tx Querier, id string, now time.Time) error {
	if _, err := tx.ExecContext(ctx, `UPDATE alerts SET resolved_at = $1 WHERE id = $2`, micros(now), id); err != nil {
		return fmt.Errorf("resolve alert: %w", err)
	}
	return nil
}

func openAlerts(ctx context.Context, q Querier) ([]Alert, error) {
	rows, err := q.QueryContext(ctx, `SELECT id, alert_key, type, invariant, name, ids, first_seen FROM alerts
		WHERE resolved_at IS NULL ORDER BY first_seen, id`)
	if err != nil {
		return nil, fmt.Errorf("read alerts: %w", err)
	}
	defer rows.Close()
	var out []Alert
	for rows.Next() {
		var a Alert
		var ids string
		var first int64
		if err := rows.Scan(&a.ID, &a.Key, &a.Type, &a.Invariant, &a.Name, &ids, &first); err != nil {
			return nil, fmt.Errorf("read alerts: %w", err)
		}
		if err := json.Unmarshal([]byte(ids), &a.IDs); err != nil {
			return nil, fmt.Errorf("read alert ids: %w", err)
		}
		a.FirstSeen = time.UnixMicro(first).UTC()
		out = append(out, a)
	}
	return out, rows.Err()
}

// OpenAlerts lists the open alerts, oldest first.
func (db *DB) OpenAlerts(ctx context.Context) ([]Alert, error) { return openAlerts(ctx, db.w) }

// PauseForFailure pauses dispatch to a processor after a quota or auth
// failure (docs/design.md §2) and opens its processor.paused alert, with the alert
// webhook row, in one transaction. It reports whether the alert is new (a
// processor already paused alerts once).
func (db *DB) PauseForFailure(ctx context.Context, p Pause, processorID string, class stet.FailureClass) (bool, error) {
	var isNew bool
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		if err := setPause(ctx, tx, p, "*"); err != nil {
			return err
		}
		var err error
		isNew, err = openAlert(ctx, tx, Alert{ID: stet.NewID("alr", p.PausedAt), Key: AlertPaused + "|" + p.Scope, Type: AlertPaused,
			Name: "processor_paused", IDs: map[string]string{"processor": processorID, "failure_class": string(class), "scope": p.Scope},
			FirstSeen: p.PausedAt}, p.PausedAt)
		return err
	})
	return isNew, err
}

// BudgetPauser is who a budget pause names as its author.
const BudgetPauser = "stet-budget"

// PauseForBudget pauses dispatch to a processor whose day's budget is
// spent and opens its processor.budget_exhausted alert (IDs only), in one
// transaction. It reports whether the alert is new.
func (db *DB) PauseForBudget(ctx context.Context, processorID string, perDay float64, now time.Time) (bool, error) {
	p := Pause{Scope: "processor:" + processorID, PausedBy: BudgetPauser, PausedAt: now,
		Reason: fmt.Sprintf("budget_exhausted: the day's budget of %.2f USD is spent (automatic; lifts at the next UTC day, or resume it)", perDay)}
	var isNew bool
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		if err := setPause(ctx, tx, p, "*"); err != nil {
			return err
		}
		day := now.UTC().Format(time.DateOnly)
		var err error
		isNew, err = openAlert(ctx, tx, Alert{ID: stet.NewID("alr", now), Key: AlertBudget + "|" + p.Scope + "|" + day, Type: AlertBudget,
			Name: "budget_exhausted", IDs: map[string]string{"processor": processorID, "scope": p.Scope, "day": day},
			FirstSeen: now}, now)
		return err
	})
	return isNew, err
}

// LiftBudgetPauses resumes the processors a budget paused before
// dayStart (the start of the current UTC day). It returns the scopes
// resumed.
func (db *DB) LiftBudgetPauses(ctx context.Context, dayStart time.Time) ([]string, error) {
	var n int
	if err := db.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM dispatch_pauses WHERE paused_by = $1 AND paused_at < $2`,
		BudgetPauser, micros(dayStart)).Scan(&n); err != nil || n == 0 {
		return nil, err // most looks find none: no write transaction
	}
	var scopes []string
	err := db.InTx(ctx, func(tx *sql.Tx) error {
		scopes = scopes[:0]
		rows, err := tx.QueryContext(ctx, `DELETE FROM dispatch_pauses WHERE paused_by = $1 AND paused_at < $2 RETURNING scope`,
			BudgetPauser, micros(dayStart))
		if err != nil {
			return fmt.Errorf("lift budget pauses: %w", err)
		}
		for rows.Next() {
			var sc string
			if err := rows.Scan(&sc); err != nil {
				rows.Close()
				return err
			}
			scopes = append(scopes, sc)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		for _, sc := range scopes {
			if err := Audit(ctx, tx, AuditEntry{Tenant: "*", Actor: BudgetPauser, Action: "dispatch.resume", ObjectType: "dispatch",
				ObjectID: sc, Now: dayStart}); err != nil {
				return err
			}
		}
		return nil
	})
	return scopes, err
}

// alertsUnchanged reports whether vs are exactly the open invariant alerts
// and no processor.paused alert is open, so SyncAlerts has nothing to do.
func (db *DB) alertsUnchanged(ctx context.Context, vs []Violation) (bool, error) {
	open, err := openAlerts(ctx, db.w)
	if err != nil {
		return false, err
	}
	openKeys := map[string]bool{}
	for _, a := range open {
		if a.Type != AlertViolated {
			return false, nil
		}
		openKeys[a.Key] = true
	}
	current := map[string]bool{}
	for _, v := range vs {
		k := ViolationKey(v)
		if !openKeys[k] {
			return false, nil
		}
		current[k] = true
	}
	return len(current) == len(openKeys), nil
}
