// Package httpapi is the HTTP server of a running flowrun app: health
// (/ping, /ready), Prometheus metrics (/metrics), pprof (optional), a JSON
// API to inspect and operate the app (status, scale, pause/resume, state,
// queue tail, dead letters, ingest) and the web UI. specs/http.md documents
// every endpoint and JSON shape.
//
// Security: the server listens on 127.0.0.1 by default. Any other address
// needs a bearer token (New refuses to start without one), and then every
// request must carry it ("Authorization: Bearer TOKEN", or the cookie the
// UI gets from "/?token=TOKEN"). Without a token, requests must name a
// loopback host (no DNS rebinding) and requests that change something must
// not come from another origin.
package httpapi
