package app

import (
	"context"
	"strings"
	"time"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/ledger"
)

// ErrDeleteTarget is DeletionRequest's answer for a target that is neither
// a report ID nor SOURCE/EXTERNAL_ID.
var ErrDeleteTarget = stet.Errorf(stet.EInvalid, "target is rep_… or SOURCE/EXTERNAL_ID")

// DeletionRequest is the request to delete target: a report ID (rep_…),
// in whichever tenant holds it, or SOURCE/EXTERNAL_ID of a configured
// source. A report or source that does not exist is stet.ENotFound.
func (a *App) DeletionRequest(ctx context.Context, target, actor string, now time.Time) (ledger.DeletionRequest, error) {
	req := ledger.DeletionRequest{Actor: actor, Now: now}
	if strings.HasPrefix(target, "rep_") {
		tenant, err := a.DB.ReportTenant(ctx, target)
		if err != nil {
			return req, err
		}
		req.Tenant, req.ReportID = tenant, target
		return req, nil
	}
	src, ext, ok := strings.Cut(target, "/")
	if !ok || src == "" || ext == "" {
		return req, ErrDeleteTarget
	}
	s := a.Config.Source(src)
	if s == nil {
		return req, stet.Errorf(stet.ENotFound, "no source %q in the config", src)
	}
	req.Tenant, req.SourceID, req.ExternalID = s.Tenant, src, ext
	return req, nil
}
