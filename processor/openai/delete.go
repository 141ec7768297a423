package openai

// The deletion side of Client: stet.CopyDeleter over the Files API.
//
// Wire facts relied on, and where they come from:
//   - DELETE /v1/files/{file_id} deletes a file and answers
//     {"id","object":"file","deleted":true} (FileService.Delete and
//     FileDeleted in file.go of github.com/openai/openai-go/v3@v3.98.0; the
//     reference's "Delete file", read through the docs search). It serves
//     batch input, output and error files alike. An unknown or already
//     deleted file is a 404 (the fake answers so; assumed of the service
//     from the reference's error list and the SDK's NotFoundError).
//   - There is no call that deletes a batch: BatchService has New, Get,
//     List and Cancel only (batch.go of the same SDK), and the reference
//     lists create, retrieve, cancel and list. The batch record holds IDs,
//     counts, timestamps and the metadata stet set (stet's batch ID), no
//     document text; its input and output live in the files deleted above.

import (
	"context"
	"errors"

	"github.com/openai/openai-go/v3/option"

	"github.com/stetlabs/stet"
	"github.com/stetlabs/stet/processor"
)

var _ stet.CopyDeleter = (*Client)(nil)

// DeleteFile deletes one batch input, output or error file. A file already
// gone (404) is done.
func (c *Client) DeleteFile(ctx context.Context, fileID string) error {
	if err := c.batchSupported(); err != nil {
		return err
	}
	if fileID == "" {
		return &stet.ProcessorError{Class: stet.FailureUnsupported, Code: codeInvalidBatch, Err: errors.New("empty file id")}
	}
	callCtx, cancel := context.WithTimeoutCause(ctx, c.timeout, errCallTimeout)
	defer cancel()
	call := batchCall{limit: maxBatchObjectBytes}
	svc := c.fileService()
	res, err := svc.Delete(callCtx, fileID, option.WithMiddleware(call.middleware))
	if err != nil {
		return processor.DeleteGone(c.classifyBatch(ctx, callCtx, err, &call))
	}
	if res == nil || !res.Deleted {
		// A 200 that does not say deleted: ask again later.
		return call.Fail(stet.FailureTransient, "", errors.New("file delete answer does not say deleted"))
	}
	return nil
}

// DeleteBatch makes no call: OpenAI's API cannot delete a batch. The answer
// is unsupported with Code stet.CodeNoDeleteAPI.
func (c *Client) DeleteBatch(ctx context.Context, batchID string) error {
	if err := c.batchSupported(); err != nil {
		return err
	}
	return processor.NoDeleteAPI("openai has no batch delete")
}
