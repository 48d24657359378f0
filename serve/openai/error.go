package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
)

// Error types and codes as OpenAI spells them; clients branch on these.
const (
	// TypeInvalidRequest is the type of every error a request can cause.
	TypeInvalidRequest = "invalid_request_error"
	// TypeServer is the type of failures on the server's side.
	TypeServer = "server_error"
	// TypeRateLimit is the type of 429 responses.
	TypeRateLimit = "rate_limit_error"
	// CodeModelNotFound is the code of a request naming an unknown model.
	CodeModelNotFound = "model_not_found"
)

// Error is an API error. It marshals as OpenAI's envelope,
// {"error": {"message", "type", "param", "code"}}, with an empty Param or
// Code sent as null as OpenAI does. Status is the HTTP status and is not
// serialized.
type Error struct {
	// Status is the HTTP status code the error is sent with.
	Status int
	// Message is the human-readable description.
	Message string
	// Type is the error class, such as [TypeInvalidRequest].
	Type string
	// Param names the offending request field ("messages[1].role"), if any.
	Param string
	// Code is a machine-readable code, such as [CodeModelNotFound], if any.
	Code string
}

// Error implements error.
func (e *Error) Error() string {
	if e.Param != "" {
		return fmt.Sprintf("%d %s (param %s): %s", e.Status, e.Type, e.Param, e.Message)
	}
	return fmt.Sprintf("%d %s: %s", e.Status, e.Type, e.Message)
}

type errorBody struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    *string `json:"code"`
}

type errorEnvelope struct {
	Error errorBody `json:"error"`
}

func orNull(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// MarshalJSON writes the error in OpenAI's envelope.
func (e *Error) MarshalJSON() ([]byte, error) {
	return json.Marshal(errorEnvelope{Error: errorBody{
		Message: e.Message, Type: e.Type, Param: orNull(e.Param), Code: orNull(e.Code),
	}})
}

// UnmarshalJSON reads OpenAI's envelope; Status is left as it was, since the
// body does not carry it.
func (e *Error) UnmarshalJSON(b []byte) error {
	var env errorEnvelope
	if err := json.Unmarshal(b, &env); err != nil {
		return err
	}
	e.Message, e.Type = env.Error.Message, env.Error.Type
	e.Param, e.Code = "", ""
	if env.Error.Param != nil {
		e.Param = *env.Error.Param
	}
	if env.Error.Code != nil {
		e.Code = *env.Error.Code
	}
	return nil
}

// InvalidRequest returns a 400 invalid_request_error about param (empty when
// the request as a whole is at fault).
func InvalidRequest(param, message string) *Error {
	return &Error{Status: http.StatusBadRequest, Type: TypeInvalidRequest, Param: param, Message: message}
}

func invalidf(param, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	if param != "" {
		msg = param + ": " + msg
	}
	return InvalidRequest(param, msg)
}

// ModelNotFound returns the 404 OpenAI sends for an unknown model.
func ModelNotFound(model string) *Error {
	return &Error{
		Status:  http.StatusNotFound,
		Type:    TypeInvalidRequest,
		Param:   "model",
		Code:    CodeModelNotFound,
		Message: fmt.Sprintf("The model `%s` does not exist.", model),
	}
}

// TooLarge returns the 413 for a body over limit bytes.
func TooLarge(limit int64) *Error {
	return &Error{
		Status:  http.StatusRequestEntityTooLarge,
		Type:    TypeInvalidRequest,
		Message: fmt.Sprintf("request body is larger than %d bytes", limit),
	}
}

// RateLimited returns a 429: the server is at capacity and the client should
// retry later (the official clients retry 429 with backoff).
func RateLimited(message string) *Error {
	return &Error{Status: http.StatusTooManyRequests, Type: TypeRateLimit, Code: "rate_limit_exceeded", Message: message}
}

// Overloaded returns a 503 for a server that cannot take work at all for now
// (starting, draining); the official clients retry it too.
func Overloaded(message string) *Error {
	return &Error{Status: http.StatusServiceUnavailable, Type: TypeServer, Message: message}
}

// ServerError returns a 500 for failures that are not the client's.
func ServerError(message string) *Error {
	return &Error{Status: http.StatusInternalServerError, Type: TypeServer, Message: message}
}

// WriteError sends err as a JSON response with its status (500 when unset).
func WriteError(w http.ResponseWriter, err *Error) {
	status := err.Status
	if status == 0 {
		status = http.StatusInternalServerError
	}
	b, _ := json.Marshal(err) // strings only: cannot fail
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}

// WriteJSON sends v as a 200 JSON response.
func WriteJSON(w http.ResponseWriter, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, err = w.Write(append(b, '\n'))
	return err
}
