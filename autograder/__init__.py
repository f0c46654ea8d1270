"""The instructor's side: build release/ from source/, grade submissions, give feedback."""
