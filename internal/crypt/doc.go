// Package crypt is Regina's payload encryption at rest: AES-256-GCM with a
// random 16-byte nonce per message (Queen's IV size) and a 16-byte tag, no
// associated data. The key is QUEEN_ENCRYPTION_KEY, 64 hex characters, as
// upstream Queen reads it.
//
// A sealed payload is nonce || ciphertext || tag. Envelope renders one as
// Queen's stored JSON shape ({"encrypted","iv","authTag"}, standard base64),
// which is what a reader without the right key is given, as upstream does.
//
// It imports nothing of ours; the actor and sqlstore use it where frames are
// built and read.
package crypt
