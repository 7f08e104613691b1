"""The job queue's live region: the rows a queue page fetches again when jobs change.

Pages are poked (portal.live.publish_jobs) and fetch their rows through the
queue view, so every row a socket leads to is rendered for its viewer, with
PrivateData applied, and never sent to anyone else.
"""
