package depcheck

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/regina-mq/regina/"

// allowed lists, for each package, the packages of ours it may import
// (production code only; tests may import anything).
var allowed = map[string][]string{
	"partition":             {},
	"cache":                 {},
	"metrics":               {},
	"reginatype":            {"partition"},
	"sqlstore":              {"partition", "reginatype", "internal/crypt"},
	"sqlstore/sqlstoretest": {"sqlstore"},
	"actor":                 {"partition", "reginatype", "cache", "metrics", "internal/crypt"},
	"wire":                  {"partition", "reginatype", "metrics", "internal/auth"},
	"cmd/regina":            {"actor", "cache", "metrics", "partition", "reginatype", "sqlstore", "wire", "internal/auth", "internal/crypt"},
	"bench":                 {},
	"bench/compare":         {"partition", "reginatype", "sqlstore", "internal/chart", "internal/procstat", "internal/pushanswer"},
	// The load generator is an outside client: nothing of ours.
	"loadtest": {"internal/chart", "internal/procstat", "internal/pushanswer"},
	// The fault checker decodes stored segments.
	"loadtest/faults":     {"partition", "internal/chart", "internal/procstat"},
	"internal/depcheck":   {},
	"internal/chart":      {},
	"internal/procstat":   {},
	"internal/pushanswer": {},
	"internal/auth":       {},
	"internal/crypt":      {},
	// Tests of the shell scripts, and the test summary of make test: nothing of ours.
	"scripts":         {},
	"scripts/testsum": {},
	// Examples are outside clients of the HTTP API: nothing of ours.
	"examples/streams-tumbling": {},
}

func TestImportDirection(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", module+"...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg := strings.TrimPrefix(fields[0], module)
		ok, known := allowed[pkg]
		require.True(t, known, "package %s is not in the import rules: add it to allowed (and docs/ARCHITECTURE.md)", pkg)
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			require.Contains(t, ok, dep, "%s must not import %s (see docs/ARCHITECTURE.md)", pkg, dep)
		}
	}
}

// peerModules are the peers bench/compare measures Regina against: they
// belong to the bench program only, never to the broker's binary.
var peerModules = []string{"github.com/riverqueue/", "github.com/nats-io/nats-server/"}

func TestBrokerLinksNoPeer(t *testing.T) {
	t.Parallel()
	links := func(pkg, peer string) bool {
		out, err := exec.Command("go", "list", "-deps", module+pkg).CombinedOutput()
		require.NoError(t, err, "%s", out)
		for dep := range strings.FieldsSeq(string(out)) {
			if strings.HasPrefix(dep, peer) {
				return true
			}
		}
		return false
	}
	// The check sees a peer where one is linked: bench/compare runs River.
	require.True(t, links("bench/compare", peerModules[0]), "bench/compare should link River")
	for _, peer := range peerModules {
		require.False(t, links("cmd/regina", peer), "the broker (cmd/regina) links %s: peers are for bench/compare only", peer)
	}
}
