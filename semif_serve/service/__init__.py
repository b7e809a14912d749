"""The application: the route table and its handlers, admission and the wait budget."""
