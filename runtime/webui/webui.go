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
		http.ServeFileFS(w, r, sub, "index.html")
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// On every answer, not only "/": the file server serves the page
		// too, at /ui/ (its directory index). frame-ancestors and
		// X-Frame-Options: no other page may frame the UI and trick a
		// click on Scale, Pause or Replay (default-src does not cover
		// framing).
		w.Header().Set("Content-Security-Policy", "default-src 'self'; style-src 'self'; script-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
		w.Header().Set("X-Frame-Options", "DENY")
		mux.ServeHTTP(w, r)
	})
}
