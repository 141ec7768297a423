-- Audio reports (docs/design.md §19). A revision delivered as audio keeps
-- the SHA-256 of its audio, and, once transcribed, of its transcript and
-- which transcriber and model made it; the transcript is its text. The
-- audio itself waits in revision_audio (sealed like text when encryption
-- is on) until its transcript is saved and its retention ends.
ALTER TABLE revisions ADD COLUMN audio_sha256 TEXT;
ALTER TABLE revisions ADD COLUMN transcript_sha256 TEXT;
ALTER TABLE revisions ADD COLUMN transcriber_id TEXT;
ALTER TABLE revisions ADD COLUMN transcriber_model TEXT;
ALTER TABLE revisions ADD COLUMN transcribed_at INTEGER;
CREATE TABLE revision_audio (
    revision_id  INTEGER PRIMARY KEY REFERENCES revisions (id),
    content_type TEXT NOT NULL,
    data         TEXT NOT NULL, -- base64 of the audio bytes, sealed when encryption is on
    sealed       INTEGER NOT NULL DEFAULT 0,
    purge_after  INTEGER        -- set once transcribed: the audio's retention ends here
);
