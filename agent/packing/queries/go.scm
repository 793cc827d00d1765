(function_declaration
  name: (identifier) @name.definition.function
  body: (block) @body) @definition.function

(method_declaration
  name: (field_identifier) @name.definition.method
  body: (block) @body) @definition.method

(type_declaration
  (type_spec
    name: (type_identifier) @name.definition.type
    type: [(struct_type) (interface_type)] @body)) @definition.type

(type_declaration
  (type_spec
    name: (type_identifier) @name.definition.type
    type: [(type_identifier) (qualified_type) (function_type) (map_type) (slice_type) (pointer_type) (generic_type)])) @definition.type
