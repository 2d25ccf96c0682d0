package doctor

// advisoriesAsOf is when advisories was last checked against NVIDIA's
// security bulletins for the Container Toolkit.
const advisoriesAsOf = "2025-07-15"

// advisory is a published container escape and the first toolkit release
// that fixes it.
type advisory struct {
	CVE     string
	FixedIn string
	Summary string
}

// advisories lists the fixed container escapes, oldest first. Add new
// ones at the end and move advisoriesAsOf.
var advisories = []advisory{
	{"CVE-2024-0132", "1.16.2", "TOCTOU in mount handling lets a crafted image reach the host file system"},
	{"CVE-2025-23359", "1.17.4", "bypass of the CVE-2024-0132 fix"},
	{"CVE-2025-23266", "1.17.8", "LD_PRELOAD in an image runs code in the createContainer hook as root on the host"},
}
