package ingest

import (
	"mime"
	"net/http"

	"github.com/ferrymeter/ferry/internal/metering/event"
	"github.com/ferrymeter/ferry/internal/metering/ingest"

	"github.com/ferrymeter/ferry/internal/platform/httpapi"
)

// routes serve the event routes.
type routes struct {
	Ingest *ingest.Service
}

// handlers are the function's route handlers, by route key.
func (a *routes) handlers() httpapi.Handlers {
	return httpapi.Handlers{
		"POST /v1/events":       a.postEvent,
		"POST /v1/events/batch": a.postBatch,
	}
}

// postEvent is POST /v1/events, in either content mode of the CloudEvents HTTP binding:
// structured (the event's JSON format as the body) or binary (the attributes in ce-* headers,
// the data as the body, Content-Type the data's type).
func (a *routes) postEvent(w http.ResponseWriter, r *http.Request) error {
	binary := event.IsBinary(r.Header)
	if binary && isMediaType(r, event.StructuredContentType) {
		return httpapi.BadRequest("The request has ce-* headers (binary mode) and an " + event.StructuredContentType +
			" body (structured mode); send the event in one mode.")
	}
	if !binary {
		if err := httpapi.CheckJSON(r); err != nil {
			return err
		}
	}
	body, err := httpapi.ReadBody(r, event.MaxEventBytes)
	if err != nil {
		return err
	}
	var accepted ingest.Accepted
	if binary {
		accepted, err = a.Ingest.AcceptBinary(r.Context(), httpapi.AccountOf(r), r.Header, body)
	} else {
		accepted, err = a.Ingest.Accept(r.Context(), httpapi.AccountOf(r), body)
	}
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, map[string]string{"id": accepted.ID, "status": "queued"})
}

// isMediaType reports whether the request's Content-Type is the media type mt.
func isMediaType(r *http.Request, mt string) bool {
	got, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && got == mt
}

// postBatch is POST /v1/events/batch: a JSON array of events (the HTTP binding's structured
// batch mode, application/cloudevents-batch+json, or plain application/json).
func (a *routes) postBatch(w http.ResponseWriter, r *http.Request) error {
	if event.IsBinary(r.Header) {
		return httpapi.BadRequest("A batch is a JSON array of events in the body; binary mode (ce-* headers) is for POST /v1/events.")
	}
	if err := httpapi.CheckJSON(r); err != nil {
		return err
	}
	body, err := httpapi.ReadBody(r, event.MaxBatchBytes)
	if err != nil {
		return err
	}
	results, err := a.Ingest.AcceptBatch(r.Context(), httpapi.AccountOf(r), body)
	if err != nil {
		return err
	}
	return httpapi.WriteJSON(w, http.StatusAccepted, map[string]any{"results": results})
}
