package apitype

// ArrayJob is an array job as GET /api/v1/arrays/{id} shows it, and as
// a submission with "array", a cancel, a hold and a release of one
// answer: its id, its owner, its indices as --array takes them, how many
// of its tasks each state has, and the tasks, in the order they were
// given.
type ArrayJob struct {
	ID   string `json:"id"`
	User string `json:"user"`
	// Array is the tasks' indices and cap as --array takes them:
	// "0-99%8".
	Array           string `json:"array"`
	ArrayCount      int    `json:"array_count"`
	ArrayMaxRunning int    `json:"array_max_running"`
	// States counts the tasks in each state they are in; a state none is
	// in is left out.
	States map[string]int `json:"states"`
	Tasks  []Job          `json:"tasks"`
}
