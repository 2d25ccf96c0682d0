package spec

import (
	"slices"
	"strings"
)

// ExemptLabel is the label that keeps a container out of the policy's
// reach; a job is under the policy, so it may not set it.
const ExemptLabel = "gpumeter.exempt"

// maxLabelValue bounds a label's value, so that a request cannot make
// the container's metadata arbitrarily large.
const maxLabelValue = 4096

// reservedLabels are the keys the agent sets or reads on a job's
// container: the job and node that find it, the declared GPU memory the
// meter holds it to, the owner its use is charged to, and the policy's
// exemption, its own and the operator's. A request may set none of them,
// whatever queue.labels says.
func (r Rules) reservedLabels() []string {
	out := []string{JobLabel, NodeLabel, GPUMemoryLabel, r.userLabel(), r.teamLabel(), ExemptLabel}
	for _, k := range r.ExemptLabels {
		if !slices.Contains(out, k) {
			out = append(out, k)
		}
	}
	return out
}

func checkLabels(labels []string, rules Rules) (map[string]string, error) {
	if len(labels) == 0 {
		return nil, nil
	}
	out := make(map[string]string, len(labels))
	for _, kv := range labels {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return nil, refuse(BadRequest, "labels", "%q is not KEY=VALUE; give --label KEY=VALUE", kv)
		}
		if !validName(k) {
			return nil, refuse(BadRequest, "labels", "%q is not a label key (1 to 255 letters, digits, '.', '_' or '-')", k)
		}
		if len(v) > maxLabelValue || strings.ContainsFunc(v, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return nil, refuse(BadRequest, "labels", "the value of %s is longer than %d bytes or holds a control character", k, maxLabelValue)
		}
		if slices.Contains(rules.reservedLabels(), k) {
			return nil, refuse(LabelNotAllowed, "labels", "%s is set by the queue itself (%s are not for requests); drop --label %s",
				k, strings.Join(rules.reservedLabels(), ", "), k)
		}
		if len(rules.Labels) == 0 {
			return nil, refuse(LabelNotAllowed, "labels", "the queue accepts no label: queue.labels is empty; drop --label %s or ask an admin to list the allowed key patterns there", k)
		}
		if !matchAny(rules.Labels, k) {
			return nil, refuse(LabelNotAllowed, "labels", "label key %s matches none of queue.labels (%s); drop --label %s or ask an admin to add a pattern",
				k, strings.Join(rules.Labels, ", "), k)
		}
		if _, dup := out[k]; dup {
			return nil, refuse(BadRequest, "labels", "%s is given twice; give each label once", k)
		}
		out[k] = v
	}
	return out, nil
}
