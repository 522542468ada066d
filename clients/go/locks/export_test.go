package locks

import "testing"

// StartTestServer starts a holdline serve for a test of package
// locks_test and answers its address.
func StartTestServer(t testing.TB) string { return startServer(t).addr }

// RepoRoot answers the repository's root, for package locks_test.
func RepoRoot(t testing.TB) string { return repoRoot(t) }

// GoBuild builds a package with the go command, for package locks_test.
func GoBuild(t testing.TB, dir, pkg, out string, env ...string) { goBuild(t, dir, pkg, out, env...) }
