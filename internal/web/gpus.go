package web

// GPUsPage is /gpus: each GPU's figures over a window, a temperature
// heatmap across the GPUs, and who holds each GPU now.
type GPUsPage struct {
	Frame
	// Window is the one shown; Windows are the ones to choose from.
	Window  string
	Windows []Choice
	// GPU is the UUID the page is narrowed to, "" for every GPU; GPUs
	// are the ones to choose from.
	GPU    string
	GPUs   []Choice
	Charts []Chart
	Heat   Chart
	// Source says where the figures come from (memory or the ledger).
	Source string
	// Holders are the GPUs as they are now.
	Holders []Tile
}

// Choice is one option of a page's control: a label and the link that
// chooses it.
type Choice struct {
	Value, Label, Href string
	Current            bool
}
