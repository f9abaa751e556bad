-- Regina schema, version 9: sealed payloads on dead letters.
--
-- A queue with encryptionEnabled stores its payloads sealed (AES-256-GCM,
-- internal/crypt; the segment frame's flags&4 says so). A dead letter is a
-- copy of the frame's fields, so its payload stays sealed at rest and this
-- flag says so; reads decrypt it, and a replay writes it back sealed.
ALTER TABLE queen.dlq ADD COLUMN encrypted boolean NOT NULL DEFAULT false;
