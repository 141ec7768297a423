package processor

import "strings"

// RepairMessage is the user turn that follows an invalid answer: it names
// what the validator found wrong and asks for the corrected JSON. problems
// are the validator's messages, which name schema locations only; the
// document and the invalid output are never part of it (the output goes
// back as the assistant's own turn).
func RepairMessage(problems []string) string {
	return "Your previous answer was not valid against the JSON schema: " +
		strings.Join(problems, "; ") +
		". Answer again with only the corrected JSON."
}
