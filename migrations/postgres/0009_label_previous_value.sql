-- The value a label action replaced, recorded when its run reads the node (NULL: the label
-- was unset, or the run never started). The outcome check offers it back as a rollback.
ALTER TABLE label_actions ADD COLUMN previous_value text;
