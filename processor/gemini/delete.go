package gemini

// The deletion side of BatchClient: stet.CopyDeleter over the Gemini API's
// batches and Files endpoints.
//
// Wire facts relied on, and where they come from (google.golang.org/genai
// @v1.77.0 in the module cache):
//   - DELETE {base}/v1beta/batches/{id} deletes a batch (the long-running
//     operation), and with it the inline requests and responses it echoes
//     (Batches.Delete in batches.go: path "batches/{name}" on the Gemini
//     API, answering an empty object read into DeleteResourceJob). The
//     Gemini API documents it as dropping the operation's result without
//     cancelling it, so it needs no ended batch; stet deletes only ended,
//     applied batches anyway.
//   - DELETE {base}/v1beta/files/{id} deletes an uploaded input file or a
//     generated results file, answering an empty object (Files.Delete in
//     files.go: path "files/{file}", Gemini API only).
//   - An unknown or deleted batch or file is a 404 NOT_FOUND (the SDK's
//     APIError; assumed of the service, the fake answers so), which is
//     done: the copy is gone.

import (
	"context"
	"errors"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

var _ stet.CopyDeleter = (*BatchClient)(nil)

// maxDeleteBodyBytes bounds a delete's answer, an empty object.
const maxDeleteBodyBytes = 1 << 20

var errUnexpectedStatus = errors.New("delete answered a status that is not a success")

// DeleteBatch deletes one batch. A batch already gone (404) is done.
func (c *BatchClient) DeleteBatch(ctx context.Context, batchID string) error {
	name, ok := resourceName("batches/", batchID)
	if !ok {
		return invalidBatch("batch id is malformed")
	}
	call, callCtx, cancel := c.startCall(ctx, c.timeout, maxDeleteBodyBytes)
	defer cancel()
	err := guard(func() error {
		_, err := c.batches.Delete(callCtx, name, nil)
		return err
	})
	return c.deleteAnswer(ctx, callCtx, err, call)
}

// DeleteFile deletes one batch input or results file. A file already gone
// (404) is done.
func (c *BatchClient) DeleteFile(ctx context.Context, fileID string) error {
	name, ok := resourceName("files/", fileID)
	if !ok {
		return invalidBatch("file id is malformed")
	}
	call, callCtx, cancel := c.startCall(ctx, c.timeout, maxDeleteBodyBytes)
	defer cancel()
	err := guard(func() error {
		_, err := c.files.Delete(callCtx, name, nil)
		return err
	})
	return c.deleteAnswer(ctx, callCtx, err, call)
}

// deleteAnswer classifies a delete call: a 2xx is done whatever the SDK
// made of its body, a 404 is done, the rest as any batch call.
func (c *BatchClient) deleteAnswer(parent, callCtx context.Context, err error, call *batchCall) error {
	switch {
	case err == nil && call.Status/100 == 2:
		return nil
	case err != nil && call.answered():
		return nil
	case err == nil:
		// The SDK took a non-2xx for a success: a redirect not followed.
		return c.callError(parent, callCtx, errUnexpectedStatus, call, "")
	}
	return processor.DeleteGone(c.callError(parent, callCtx, err, call, ""))
}
