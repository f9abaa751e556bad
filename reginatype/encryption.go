package reginatype

import "errors"

// ErrNoEncryptionKey means the queue has encryptionEnabled and this broker
// has no QUEEN_ENCRYPTION_KEY, or a stored payload is sealed and this
// broker cannot open it: nothing was written or leased. Encryption fails
// closed: a payload is never stored in plaintext into an encrypted queue,
// nor served sealed as a message's data. Another broker, with the key, can
// serve the request.
var ErrNoEncryptionKey = errors.New("the queue's payloads are encrypted and this broker has no QUEEN_ENCRYPTION_KEY " +
	"(or not the key they were sealed with)")
