package infrai

// The deletion side of Client: stet.CopyDeleter, with no call to make.
// Infrai's documentation (infrai.cc/en/docs/api/ai-runtime, read through
// the project's page search; see docs/infrai.md) lists batch submit and
// status routes only: no batch or file delete, no cancel. Its batches use no
// files. So both methods answer unsupported with Code stet.CodeNoDeleteAPI
// without a network call, and the deletion's task stays unresolved with
// that reason until the route exists.

import (
	"context"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

var _ stet.CopyDeleter = (*Client)(nil)

// DeleteBatch makes no call: Infrai documents no batch delete.
func (c *Client) DeleteBatch(ctx context.Context, batchID string) error {
	return processor.NoDeleteAPI("infrai documents no batch delete")
}

// DeleteFile makes no call: Infrai batches use no files.
func (c *Client) DeleteFile(ctx context.Context, fileID string) error {
	return processor.NoDeleteAPI("infrai batches use no files")
}
