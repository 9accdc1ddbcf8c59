// Package webui is the web UI of a running app: one page that draws the
// flow graph (flowlets as nodes in topological columns, queues as edges) as
// SVG with live rates, backlog and errors, scale and pause controls, and the
// dead letters. It polls the JSON API of package httpapi; the assets are
// embedded and nothing is fetched from anywhere else.
package webui

import (
	"embed"
	"io/fs"
	"net/http"
)

//go:embed assets
var assets embed.FS

// Handler serves the page at "/" and its assets under "/ui/".
func Handler() http.Handler {
	sub, _ := fs.Sub(assets, "assets")
	files := http.FileServerFS(sub)
	mux := http.NewServeMux()
	mux.Handle("GET /ui/", http.StripPrefix("/ui/", files))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:")
		http.ServeFileFS(w, r, sub, "index.html")
	})
	return mux
}
